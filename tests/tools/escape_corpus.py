"""Escape techniques against the Python sandbox, as plain Python source.

Each technique reaches the interpreter's builtins (or ``os``) its own way and then calls
``attack`` (from `prelude`), which tries everything a hostile model would: write files on the
host (workspace, ``/tmp``, ``/var/tmp``, ``/dev/shm``), read the vault key by every path form,
connect to a loopback listener, and run a shell doing the same. Through `python_repl` and
`/repl` the AST layer refuses most of them up front; run raw (no AST layer at all) they
really execute, and the kernel wall alone must keep them harmless.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class Target:
    """What the attacks aim at; none of it may be reached."""

    canaries: tuple[Path, ...]  # host files that must never appear
    keys: tuple[str, ...]  # paths (by every form) to the planted key
    key_bytes: bytes
    port: int  # loopback listener that records every connection


PRELUDE = '''
def attack(b):
    imp = b["__import__"] if isinstance(b, dict) else b.__import__
    os, socket = imp("os"), imp("socket")
    for path in @canaries@:
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
            os.write(fd, b"pwned")
            os.close(fd)
            print("WROTE", path)
        except OSError as exc:
            print("no write", path, exc.errno)
    for path in @keys@:
        try:
            with open(path, "rb") as fh:
                print("READ", fh.read())
        except OSError as exc:
            print("no read", exc.errno)
    try:
        socket.create_connection(("127.0.0.1", @port@), timeout=1).close()
        print("CONNECTED")
    except OSError as exc:
        print("no socket", exc.errno)
    os.system("echo pwned > @shell_canary@; cat @key@ 2>&1; "
              "exec 3<>/dev/tcp/127.0.0.1/@port@ 2>&1")
'''


TECHNIQUES: dict[str, str] = {
    "subclasses": (
        "for c in ().__class__.__bases__[0].__subclasses__():\n"
        "    g = getattr(c.__init__, '__globals__', {})\n"
        "    if '__builtins__' in g:\n"
        "        attack(g['__builtins__'])\n"
        "        break"
    ),
    "type_metaclass_match": (
        "M = type('M', (type,), {'__instancecheck__': lambda c, o: True})\n"
        "P = M('P', (), {'__match_args__': ('__globals__',)})\n"
        "def f():\n    pass\n"
        "match f:\n    case P(g):\n        attack(g['__builtins__'])"
    ),
    "match_bound_method_func": (
        "class M(type):\n    def __instancecheck__(cls, obj):\n        return True\n"
        "class P(metaclass=M):\n    __match_args__ = ('__func__',)\n"
        "class Q(metaclass=M):\n    __match_args__ = ('__globals__',)\n"
        "class A:\n    def m(self):\n        pass\n"
        "match A().m:\n    case P(Q(g)):\n        attack(g['__builtins__'])"
    ),
    "generator_gi_frame": (
        "def gen():\n    yield 1\n"
        "g = gen()\nnext(g)\nattack(g.gi_frame.f_builtins)"
    ),
    "frame_f_back": (
        "def gen():\n    yield 1\n"
        "g = gen()\nnext(g)\nattack(g.gi_frame.f_back.f_globals['__builtins__']"
        " if g.gi_frame.f_back else g.gi_frame.f_globals['__builtins__'])"
    ),
    "traceback_tb_frame": (
        "try:\n    1 / 0\nexcept ZeroDivisionError as exc:\n"
        "    attack(exc.__traceback__.tb_frame.f_builtins)"
    ),
    "coroutine_cr_frame": (
        "async def c():\n    pass\n"
        "co = c()\nb = co.cr_frame.f_builtins\nco.close()\nattack(b)"
    ),
    "reduce_pickle": (
        "import pickle\n"
        "class Evil:\n    def __reduce__(self):\n"
        "        return (exec, ('attack(__builtins__)',))\n"
        "pickle.loads(pickle.dumps(Evil()))"
    ),
    "format_string_get_field": (
        "import string\n"
        "def f():\n    pass\n"
        "g = string.Formatter().get_field('0.__globals__', [f], {})[0]\n"
        "print('{0.__globals__[__name__]}'.format(f))\n"
        "attack(g['__builtins__'])"
    ),
    "decorator": (
        "@lambda fn: fn.__globals__['__builtins__']\n"
        "def grab():\n    pass\n"
        "attack(grab)"
    ),
    "import_builtin": "attack(__import__('builtins'))",
    "importlib": "import importlib\nattack(importlib.import_module('builtins'))",
    "sys_modules": (
        "import sys\nattack(sys.modules['builtins'])"
    ),
    "builtin_importer": (
        "bi = [c for c in object.__subclasses__() if c.__name__ == 'BuiltinImporter'][0]\n"
        "attack(bi.load_module('builtins'))"
    ),
    "eval_exec_compile": (
        "code = compile('attack(__builtins__)', 's', 'exec')\neval(code)"
    ),
    "ctypes_system": (
        "import ctypes\nlibc = ctypes.CDLL(None)\n"
        "libc.system(b'echo pwned > @ws_canary@')\nattack(__builtins__)"
    ),
    "proc_self_mem": (
        "import os\n"
        "fd = os.open('/proc/self/mem', os.O_RDWR)\nos.close(fd)\n"
        "for p in ('/proc/1/environ', '/proc/1/root@key@', '/proc/self/root@key@'):\n"
        "    try:\n        print(open(p, 'rb').read()[:200])\n"
        "    except OSError as exc:\n        print('no', p, exc.errno)\n"
        "attack(__builtins__)"
    ),
    "subprocess_shell": (
        "import subprocess\n"
        "subprocess.run(['/bin/sh', '-c', 'echo pwned > @tmp_canary@; cat @key@'])\n"
        "attack(__builtins__)"
    ),
    "symlink_out_of_scratch": (
        "import os\n"
        "try:\n    os.symlink('@ws_canary@', 'link')\n"
        "    open('link', 'w').write('pwned')\n"
        "except OSError as exc:\n    print('no symlink write', exc.errno)\n"
        "attack(__builtins__)"
    ),
    "fork_bomb": (
        "import os\n"
        "while True:\n    try:\n        os.fork()\n    except OSError:\n        pass"
    ),
    "memory_bomb": (
        "blocks = []\nwhile True:\n    blocks.append(bytearray(64 * 1024 * 1024))"
    ),
    "huge_output": "while True:\n    print('A' * 100000)",
    "sockets_raw": (
        "import socket\n"
        "for family, kind in ((socket.AF_INET, socket.SOCK_STREAM),"
        " (socket.AF_INET6, socket.SOCK_STREAM), (socket.AF_INET, socket.SOCK_DGRAM)):\n"
        "    try:\n        s = socket.socket(family, kind)\n"
        "        s.settimeout(1)\n        s.connect(('127.0.0.1' if family == socket.AF_INET"
        " else '::1', @port@))\n        s.send(b'hi')\n        print('SENT')\n"
        "    except OSError as exc:\n        print('no', exc.errno)\n"
        "attack(__builtins__)"
    ),
    "daemonize_and_outlive": (
        "import os, time\n"
        "if os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
        "        time.sleep(2)\n        attack(__builtins__)\n        time.sleep(600)\n"
        "    os._exit(0)\n"
        "print('parent done')"
    ),
    "ignore_signals_spin": (
        "import signal\nfor s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):\n"
        "    signal.signal(s, signal.SIG_IGN)\nwhile True:\n    pass"
    ),
}


NOT_ATTACKING = frozenset({"fork_bomb", "memory_bomb", "huge_output", "ignore_signals_spin",
                           "daemonize_and_outlive"})
"""Techniques that attack the limits, not the files, keys or network."""


def program(technique: str, target: Target) -> str:
    """The technique with the prelude, the target's paths filled in (``@name@``)."""
    values = {
        "canaries": repr([str(p) for p in target.canaries]), "keys": repr(list(target.keys)),
        "port": str(target.port), "shell_canary": str(target.canaries[0]) + ".sh",
        "key": target.keys[0], "ws_canary": str(target.canaries[0]),
        "tmp_canary": str(target.canaries[1]),
    }  # fmt: skip
    text = PRELUDE + "\n" + TECHNIQUES[technique] + "\n"
    for name, value in values.items():
        text = text.replace(f"@{name}@", value)
    return text
