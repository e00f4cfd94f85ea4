# Shared by scripts/run and scripts/test: install the Debian packages SoulFlow uses where we can.
# Usage: source scripts/_system_deps.sh PACKAGE...   (Debian package names, e.g. bubblewrap)
# As root with apt-get, missing packages are installed; otherwise we say what is missing and go on:
# the daemon then reports the reduced mode (e.g. no code sandbox) and, under CI=true, the tests
# that need a package fail instead of skipping.
_soulflow_missing=()
for _pkg in "$@"; do
    if ! dpkg-query -W -f='${Status}' "$_pkg" 2>/dev/null | grep -q "install ok installed"; then
        _soulflow_missing+=("$_pkg")
    fi
done
if [ "${#_soulflow_missing[@]}" -gt 0 ]; then
    if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
        echo "installing Debian packages: ${_soulflow_missing[*]}" >&2
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq >/dev/null 2>&1 || true
        apt-get install -y -qq --no-install-recommends "${_soulflow_missing[@]}" >/dev/null \
            || echo "warning: could not install ${_soulflow_missing[*]}" >&2
    else
        echo "note: missing Debian packages ${_soulflow_missing[*]}; install them with" \
             "'sudo apt-get install ${_soulflow_missing[*]}' (see docs/security.md)" >&2
    fi
fi
unset _soulflow_missing _pkg
