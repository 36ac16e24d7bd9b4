"""A Python process without some installed packages, for `python tests/without_extras.py
PACKAGES -m MODULE ARGS...` or `... PACKAGES SCRIPT ARGS...` (PACKAGES: names joined by
commas; `extras` stands for every package an extra brings).

Importing a blocked package (or anything under it) fails with ModuleNotFoundError, as in a
virtual environment where it was never installed (`importlib.import_module` too). The blocker
is handed down to the Python processes this one starts (through PYTHONPATH and a
sitecustomize), so `asyncclient` started by a CI loop in such a process lacks them too. The
test process itself is untouched.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

# Every package an extra brings, and what those bring (rich: pygments, markdown-it; jinja2:
# markupsafe; trustme: cryptography, cffi).
EXTRAS = (
    "rich", "pygments", "markdown_it", "mdurl", "jinja2", "markupsafe", "tomlkit", "trustme",
    "cryptography", "cffi", "mcp", "opentelemetry", "re2",
)  # fmt: skip

_SITECUSTOMIZE = """
import importlib.abc
import os
import sys

_BLOCKED = frozenset(os.environ.get("ASYNCCLIENT_TEST_BLOCKED", "").split(","))


class _NotInstalled(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in _BLOCKED:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, _NotInstalled())
"""


def blocked_env(packages: str, env: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a process (and its children) without `packages`."""
    names = ",".join(EXTRAS) if packages == "extras" else packages
    folder = Path(tempfile.mkdtemp(prefix="asyncclient-without-"))
    (folder / "sitecustomize.py").write_text(_SITECUSTOMIZE)
    base = dict(os.environ if env is None else env)
    base["ASYNCCLIENT_TEST_BLOCKED"] = names
    base["PYTHONPATH"] = os.pathsep.join(p for p in (str(folder), base.get("PYTHONPATH")) if p)
    return base


def main() -> None:
    packages, *rest = sys.argv[1:]
    env = blocked_env(packages)
    os.execve(sys.executable, [sys.executable, *rest], env)


if __name__ == "__main__":
    main()
