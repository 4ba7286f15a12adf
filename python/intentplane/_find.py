"""Where this wheel's `ipc` is: the scripts folder of the installation
that holds this module (a venv's `bin/`, the user scheme's, `pip install
--target`'s `bin/`), never the PATH."""

from __future__ import annotations

import os
import sys
import sysconfig
from pathlib import Path

_EXE = "ipc.exe" if sys.platform == "win32" else "ipc"


def _candidates() -> list[Path]:
    here = Path(__file__).resolve().parent
    out: list[Path] = []
    # the scheme this interpreter installs into (a venv's bin/, or the
    # system's), then the user scheme's (`pip install --user`)
    out.append(Path(sysconfig.get_path("scripts")))
    user = f"{os.name}_user" if os.name != "posix" else "posix_user"
    if sys.platform == "darwin" and sys._framework:  # type: ignore[attr-defined]
        user = "osx_framework_user"
    try:
        out.append(Path(sysconfig.get_path("scripts", scheme=user)))
    except KeyError:
        pass
    # `pip install --target DIR`: DIR/intentplane and DIR/bin
    out.append(here.parent / "bin")
    # site-packages inside a prefix: PREFIX/lib/pythonX.Y/site-packages
    if len(here.parents) > 3:
        out.append(here.parents[3] / "bin")
    return out


def find_ipc() -> str:
    """The path of the `ipc` binary installed with this module.

    Raises `FileNotFoundError` naming the folders looked in when there is
    none (a module copied without its wheel's binary)."""
    seen: list[str] = []
    for folder in _candidates():
        exe = folder / _EXE
        if str(exe) in seen:
            continue
        seen.append(str(exe))
        if exe.is_file() and os.access(exe, os.X_OK):
            return str(exe)
    raise FileNotFoundError(
        "the `ipc` binary of the intentplane wheel is not installed beside this module "
        f"(looked in: {', '.join(seen)}); install the wheel (`pip install intentplane`)"
    )
