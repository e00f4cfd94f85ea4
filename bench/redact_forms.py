"""What masking a tool's output costs: 50 KB outputs, with and without a secret in them.

    python bench/redact_forms.py [--repeats 200] [--known 8]

Measures the registry's output step (`ToolRegistry._finish`: the call's secrets back to their
references, transformed forms blanked, truncation) on three kinds of 50 KB output - shell text,
one base64 blob, an `xxd` dump - for a call that opened one secret, with a redactor that knows
``--known`` other values (the daemon's credentials, secrets opened by earlier calls). "clean":
the output holds no secret; "with secret": it holds the value as it is, reversed and base64'd.
Uses only what the registry had before forms were caught, so it runs on older commits too.
"""

from __future__ import annotations

import argparse
import base64
import random
import secrets
import string
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import describe_ms  # noqa: E402
from soulflow.agent.tools.base import ToolResult  # noqa: E402
from soulflow.agent.tools.registry import ToolRegistry  # noqa: E402
from soulflow.security.redact import Redactor  # noqa: E402

SIZE = 50 * 1024
SECRET = "Tiger-Lily-" + secrets.token_urlsafe(18)


def shell_text(rng: random.Random) -> str:
    words = ["drwxr-xr-x", "-rw-r--r--", "root", "staff", "4096", "Jan", "12:01", "src/",
             "README.md", "test_main.py", "import", "return", "def", "error:", "warning:",
             "0x7ffd3a2c", "done", "100%", "GET", "/api/v1/items?id=42&q=a%20b", "200"]
    lines, size = [], 0
    while size < SIZE:
        line = " ".join(rng.choice(words) for _ in range(rng.randint(4, 12)))
        lines.append(line)
        size += len(line) + 1
    return "\n".join(lines)[:SIZE]


def base64_blob(rng: random.Random) -> str:
    raw = rng.randbytes(SIZE * 3 // 4)
    encoded = base64.b64encode(raw).decode()
    return "\n".join(encoded[i:i + 76] for i in range(0, len(encoded), 76))[:SIZE]


def hex_dump(rng: random.Random) -> str:
    raw = rng.randbytes(SIZE // 4)
    lines = []
    for offset in range(0, len(raw), 16):
        chunk = raw[offset:offset + 16]
        pairs = [chunk[i:i + 2].hex() for i in range(0, len(chunk), 2)]
        shown = "".join(chr(b) if 32 <= b < 127 else "." for b in chunk)
        lines.append(f"{offset:08x}: {' '.join(pairs):<40}  {shown}")
    return "\n".join(lines)[:SIZE]


def with_secret(text: str) -> str:
    """``text`` with the secret in it as it is, reversed and base64'd, spread out."""
    forms = [SECRET, SECRET[::-1], base64.b64encode(SECRET.encode()).decode()]
    third = len(text) // 4
    parts = [text[:third], forms[0], text[third:2 * third], forms[1], text[2 * third:3 * third],
             forms[2], text[3 * third:]]
    return " ".join(parts)[:SIZE + 200]


def measure(registry: ToolRegistry, text: str, repeats: int) -> list[float]:
    timings = []
    for _ in range(repeats):
        result = ToolResult("ok", text)
        start = time.perf_counter()
        registry._finish(result, {"PW": SECRET})  # the registry's output step, as is
        timings.append(time.perf_counter() - start)
    return timings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=200)
    parser.add_argument("--known", type=int, default=8,
                        help="other values the redactor knows (default 8)")
    args = parser.parse_args()
    rng = random.Random(17)
    alphabet = string.ascii_letters + string.digits
    known = ["".join(rng.choice(alphabet) for _ in range(rng.randint(16, 48)))
             for _ in range(args.known)]
    redactor = Redactor(known)
    redactor.register(SECRET)  # as the registry does when it opens the secret
    registry = ToolRegistry(max_output_chars=10 * SIZE, redactor=redactor)
    print(f"one secret opened by the call, {args.known} other values known to the redactor; "
          f"{SIZE // 1024} KB outputs, {args.repeats} runs each")
    for label, make in (("shell text", shell_text), ("base64 blob", base64_blob),
                        ("xxd dump", hex_dump)):
        clean = make(rng)
        dirty = with_secret(clean)
        for case, text in (("clean", clean), ("with secret", dirty)):
            out = ToolResult("ok", text)
            registry._finish(out, {"PW": SECRET})
            leaked = [form for form in (SECRET, SECRET[::-1],
                                        base64.b64encode(SECRET.encode()).decode())
                      if form in out.output]
            shown = f"{len(leaked)} form(s) left" if case == "with secret" else ""
            print(f"  {label:12} {case:12} {describe_ms(measure(registry, text, args.repeats))}"
                  f"  {shown}")


if __name__ == "__main__":
    main()
