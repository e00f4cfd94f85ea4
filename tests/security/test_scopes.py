"""Scoped secrets, played by another chat's user: a value sealed in chat A is usable only in A,
the operator's secrets everywhere, and `/secret` in a chat manages only that chat's names
unless its user is an admin."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from aiohttp import web

from soulflow.agent.tools import build_default_registry
from soulflow.agent.tools.base import ChatRef, ToolContext
from soulflow.agent.tools.registry import ToolRegistry
from soulflow.agent.tools.web import WebFetchTool
from soulflow.channels.base import Command
from soulflow.contracts import InboundMessage
from soulflow.conversation.access import AdminPolicy
from soulflow.conversation.secret_command import make_secret_command
from soulflow.security.inbound import InboundSealer
from soulflow.security.references import inspect_secret_references_for_orchestration
from soulflow.security.syntax import secret_reference
from soulflow.security.vault import SecretVault, chat_scope
from tests.running import serving
from tests.vaults import file_vault

A, B = ("telegram", "100"), ("telegram", "200")
ADMINS = AdminPolicy.from_settings({"TELEGRAM_ADMIN_USERS": "boss, *", "SLACK_ADMIN_USERS": ""})


@pytest.fixture
def vault(tmp_path: Path) -> SecretVault:
    return file_vault(tmp_path / "security")


SEEN: list[str] = []


@pytest.fixture
def registry() -> ToolRegistry:
    """The real registry plus `echo`, a tool that records the (resolved) value it was given."""
    SEEN.clear()

    def echo(params: dict[str, str], _ctx: ToolContext) -> str:
        SEEN.append(params.get("v", ""))
        return params.get("v", "")

    registry = build_default_registry()
    registry.register_dynamic("echo", "echo", {"type": "object"}, echo)
    return registry


def msg(chat: tuple[str, str], text: str, sender: str = "alice") -> InboundMessage:
    return InboundMessage(provider=chat[0], chat_id=chat[1], message_id="m", sender_id=sender,
                          text=text, is_direct=True)


def ctx(tmp_path: Path, vault: SecretVault, chat: tuple[str, str]) -> ToolContext:
    return ToolContext(tmp_path, ChatRef(chat[0], chat[1], sender_id="alice"), vault=vault,
                       approved=True)


async def test_sealed_in_a_resolves_in_a_only(tmp_path: Path, vault: SecretVault,
                                              registry: ToolRegistry) -> None:
    sealer = InboundSealer(vault, ADMINS.is_admin)
    first = msg(A, "password=Tr0ub4dor&3")
    sealer.seal(first)
    setm = msg(A, "/secret set MY_PIN 99887766")
    sealer.seal(setm)
    [sealed_ref] = [w for w in first.text.split("=") if w.startswith("{{secret:")]
    for ref, plain in ((sealed_ref, "Tr0ub4dor&3"), (secret_reference("MY_PIN"), "99887766")):
        SEEN.clear()
        in_a = await registry.execute("echo", {"v": ref}, ctx(tmp_path, vault, A))
        assert in_a.ok and [plain] == SEEN  # the tool got the value...
        assert in_a.output == ref  # ...and its output is masked back to the reference
        SEEN.clear()
        in_b = await registry.execute("echo", {"v": ref}, ctx(tmp_path, vault, B))
        assert in_b.status == "error" and "secret_resolution_required" in in_b.output
        assert "Tr0ub4dor" not in in_b.output and "99887766" not in in_b.output
        assert SEEN == []  # the tool never ran in chat B
        # exactly what a never-stored name gets: nothing says it exists elsewhere
        never = await registry.execute("echo", {"v": "{{secret:NOPE_X}}"},
                                       ctx(tmp_path, vault, B))
        assert in_b.output.replace(ref[9:-2], "NAME") == never.output.replace("NOPE_X", "NAME")
        report = inspect_secret_references_for_orchestration(ref, vault,
                                                             chat=chat_scope(*B))
        assert not report.ok and report.missing == [ref[9:-2]]
        assert inspect_secret_references_for_orchestration(ref, vault, chat=chat_scope(*A)).ok


async def test_a_token_copied_out_of_chat_a_does_not_open_in_b(
        tmp_path: Path, vault: SecretVault, registry: ToolRegistry) -> None:
    sealer = InboundSealer(vault)
    first = msg(A, "password=Tr0ub4dor&3")
    sealer.seal(first)
    name = next(n for n in vault.names() if ".password." in n)
    token = json.loads(vault.secrets_path.read_text())["secrets"][name]["ciphertext"]
    for ref in (f"{{{{secret:{name}:{token}}}}}", token):
        in_b = await registry.execute("echo", {"v": ref}, ctx(tmp_path, vault, B))
        assert in_b.status == "error" and "Tr0ub4dor" not in in_b.output
    vault.remove(name)  # even with the entry gone, the inbound name says whose it was
    in_b = await registry.execute("echo", {"v": f"{{{{secret:{name}:{token}}}}}"},
                                  ctx(tmp_path, vault, B))
    assert in_b.status == "error"


async def test_operator_secrets_resolve_everywhere(tmp_path: Path, vault: SecretVault,
                                                   registry: ToolRegistry) -> None:
    vault.set("DEPLOY_TOKEN", "operator-value-123")  # what `soulflow secret set` does
    for chat in (A, B, ("slack", "C1"), ("local", "test")):
        result = await registry.execute("echo", {"v": "x {{secret:DEPLOY_TOKEN}}"},
                                        ctx(tmp_path, vault, chat))
        assert result.ok and result.output == "x {{secret:DEPLOY_TOKEN}}"  # masked back


def test_old_vault_files_read_as_global(vault: SecretVault) -> None:
    vault.set("LEGACY", "legacy-value")
    data = json.loads(vault.secrets_path.read_text())
    assert "scope" not in data["secrets"]["LEGACY"]  # global entries look as they always did
    assert vault.get("LEGACY", chat=chat_scope(*B)) == "legacy-value"
    vault.set("SCOPED", "v-123456", scope=chat_scope(*A))
    assert json.loads(vault.secrets_path.read_text())["secrets"]["SCOPED"]["scope"] == \
        "telegram:100"
    assert vault.rotate_key() == 2
    assert vault.info("SCOPED").scope == "telegram:100"  # rotation keeps scopes


async def run_secret(vault: SecretVault, chat: tuple[str, str], text: str,
                     sender: str = "alice") -> str:
    message = msg(chat, text, sender)
    InboundSealer(vault, ADMINS.is_admin).seal(message)
    handler = make_secret_command(vault, ADMINS)
    args = message.text.split(None, 1)[1] if " " in message.text else ""
    return await handler(Command("secret", args), message)


async def test_non_admin_lists_and_removes_only_this_chats(vault: SecretVault) -> None:
    vault.set("OPERATOR_KEY", "op-value-1234")
    assert "Stored secret A_KEY" in await run_secret(vault, A, "/secret set A_KEY aaaa-1111")
    assert "Stored secret B_KEY" in await run_secret(vault, B, "/secret set B_KEY bbbb-2222")
    listed = await run_secret(vault, B, "/secret list")
    assert "B_KEY" in listed and "A_KEY" not in listed and "OPERATOR_KEY" not in listed
    for name in ("A_KEY", "OPERATOR_KEY"):
        assert await run_secret(vault, B, f"/secret rm {name}") == f"There is no secret {name}."
        assert vault.has(name)
    assert await run_secret(vault, B, "/secret rm B_KEY") == "Removed secret B_KEY."
    # overwriting someone else's name is refused, and the value is never kept in clear
    reply = await run_secret(vault, B, "/secret set OPERATOR_KEY stolen-9999")
    assert "already used outside this chat" in reply and "stolen" not in reply
    assert vault.get("OPERATOR_KEY") == "op-value-1234"
    assert "stolen-9999" not in vault.secrets_path.read_text()


async def test_admins_see_and_manage_every_chat(vault: SecretVault) -> None:
    vault.set("OPERATOR_KEY", "op-value-1234")
    await run_secret(vault, A, "/secret set A_KEY aaaa-1111")
    listed = await run_secret(vault, B, "/secret list", sender="boss")
    assert "A_KEY (telegram:100)" in listed and "OPERATOR_KEY (global)" in listed
    assert await run_secret(vault, B, "/secret rm A_KEY", sender="boss") == "Removed secret A_KEY."
    reply = await run_secret(vault, B, "/secret set OPERATOR_KEY new-op-5678", sender="boss")
    assert "Stored secret OPERATOR_KEY" in reply
    assert vault.get("OPERATOR_KEY", chat=chat_scope(*A)) == "new-op-5678"  # still global
    local = await run_secret(vault, ("local", "test"), "/secret list", sender="")
    assert "OPERATOR_KEY (global)" in local  # the local operator always is an admin


def test_admin_policy() -> None:
    assert ADMINS.is_admin("telegram", "boss") and ADMINS.is_admin("local", "")
    assert not ADMINS.is_admin("telegram", "*") and not ADMINS.is_admin("telegram", "alice")
    assert not ADMINS.is_admin("slack", "boss") and not ADMINS.is_admin("slack", "")


# ----------------------------------------------------------------- web_fetch with a secret


async def test_web_fetch_with_a_secret_asks_naming_the_host(tmp_path: Path, vault: SecretVault,
                                                            registry: ToolRegistry) -> None:
    vault.set("API_TOKEN", "tok-value-123456")
    plain = ToolContext(tmp_path, ChatRef(*A), vault=vault)
    for params in ({"url": "https://api.example.com/v1?key={{secret:API_TOKEN}}"},
                   {"url": "https://api.example.com/{{secret:API_TOKEN}}/x", "max_chars": 500}):
        result = await registry.execute("web_fetch", params, plain)
        assert result.status == "approval_required"
        assert result.reason == "sends secret API_TOKEN to api.example.com"
    no_secret = await registry.execute("web_fetch", {"url": "ftp://x"}, plain)
    assert no_secret.status == "error"  # not put to approval: nothing secret in it


async def test_approved_fetch_with_a_secret_stays_on_its_host(tmp_path: Path,
                                                              vault: SecretVault) -> None:
    received: list[str] = []

    async def bounce(request: web.Request) -> web.Response:
        received.append(request.query.get("k", ""))
        raise web.HTTPFound(f"http://localhost:{request.url.port}/collect?k="
                            f"{request.query.get('k', '')}")

    app = web.Application()
    app.router.add_get("/bounce", bounce)
    async with serving(app) as port:
        registry = ToolRegistry()
        registry.register(WebFetchTool(allowed_hosts={"127.0.0.1", "localhost"}))
        vault.set("API_TOKEN", "tok-value-123456")
        approved = ToolContext(tmp_path, ChatRef(*A), vault=vault, approved=True)
        result = await registry.execute(
            "web_fetch", {"url": f"http://127.0.0.1:{port}/bounce?k={{{{secret:API_TOKEN}}}}"},
            approved)
    assert received == ["tok-value-123456"]  # the approved host got it
    assert result.status == "error" and "redirected to localhost" in result.output
    assert "tok-value" not in result.output
