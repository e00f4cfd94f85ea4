"""The daemon as the programs run it: a runtime with its dashboard.

The dashboard depends on the runtime (its state, hub, bus, local channel, cron admin), never
the other way round, so the commands that run a daemon build it here, around a runtime that
knows it only as a `FrontEnd`. `soulflow run` and the embedded `soulflow chat` use
`create_app`; tests and benches that want no HTTP server use `create_runtime`.
"""

from __future__ import annotations

from soulflow.config import Settings, id_list
from soulflow.cron.api import cron_routes
from soulflow.dashboard.connections import ConnectionLimits
from soulflow.dashboard.listener import PortReservation
from soulflow.dashboard.service import DashboardService
from soulflow.runtime import Runtime, create_runtime


def build_dashboard(runtime: Runtime,
                    reservation: PortReservation | None = None) -> DashboardService:
    settings = runtime.settings
    return DashboardService(
        host=settings["DASHBOARD_HOST"], port=settings["DASHBOARD_PORT"],
        token=settings["DASHBOARD_TOKEN"], hub=runtime.hub, state=runtime.state,
        local=runtime.local, bus=runtime.bus, ready=lambda: runtime.ready,
        allowed_hosts=id_list(settings["DASHBOARD_ALLOWED_HOSTS"]),
        routes=cron_routes(runtime.cron, runtime.channels.names), runtime=runtime,
        limits=ConnectionLimits(
            max_open=settings["DASHBOARD_MAX_CONNECTIONS"],
            max_per_address=settings["DASHBOARD_MAX_CONNECTIONS_PER_IP"],
            header_timeout_s=settings["DASHBOARD_HEADER_TIMEOUT_S"]),
        reservation=reservation)


def create_app(settings: Settings) -> Runtime:
    """`create_runtime` plus the dashboard when `DASHBOARD_ENABLED`. Its port is bound
    first: a port in use fails the start before the workspace, its lock or any runtime/
    file is created (DashboardError)."""
    if not settings.flag("DASHBOARD_ENABLED"):
        return create_runtime(settings, None)
    reservation = PortReservation.take(settings["DASHBOARD_HOST"], settings["DASHBOARD_PORT"])
    try:
        return create_runtime(settings, lambda runtime: build_dashboard(runtime, reservation))
    except BaseException:
        reservation.release()
        raise
