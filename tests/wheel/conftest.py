"""The installed wheel's world: `scripts/test-wheel` runs these tests
with the venv's Python, the venv's `bin/` alone on the PATH (no cargo, no
system cvc5), from the wheel installed there. A session's fixture makes
what a user would with the wheel's own `ipc`: a signed bank bundle (its
guarantees proven by the wheel's solver), a world, a mandate."""

import os
import pathlib
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
BIN = pathlib.Path(sys.prefix) / "bin"
IPC = BIN / "ipc"


def ipc(*args, cwd=None, check=True):
    out = subprocess.run([str(IPC), *args], cwd=cwd, capture_output=True, text=True)
    if check and out.returncode != 0:
        raise AssertionError(f"ipc {' '.join(args)}: exit {out.returncode}\n{out.stdout}\n{out.stderr}")
    return out


@pytest.fixture(scope="session")
def bank(tmp_path_factory):
    d = tmp_path_factory.mktemp("bank")
    shutil.copytree(ROOT / "packs" / "bank", d / "packs" / "bank")
    for who in ("release", "issuer", "emma"):
        ipc("keygen", "-o", who, cwd=d)
    ipc("build", "packs/bank", "-o", "bundle.json", "--sign", "release.key", cwd=d)
    (d / "world.toml").write_text(
        'mandate_keys = ["issuer.pub"]\nbundle_keys = ["release.pub"]\n'
        '[approvers]\nemma = "emma.pub"\n[registries]\nbank = "packs/bank/registries"\n'
    )
    ipc(
        "token", "issue", "--bundle", "bundle.json", "--world", "world.toml", "--key", "issuer.key",
        "--pack", "bank", "--user", "emma", "--scope", "payments.write",
        "--claim", "account=emma-checking", "--claim", "currency=EUR",
        "--budget", "2000.00", "--calls", "10", "--ttl", "3600", "-o", "mandate.json", cwd=d,
    )
    return d


@pytest.fixture(scope="session")
def index(tmp_path_factory):
    """What `uvx` installs from in place of PyPI: a local package index
    (PEP 503, `file://`) holding this wheel and the cvc5 wheel."""
    d = tmp_path_factory.mktemp("index")
    wheel = os.environ.get("IPC_WHEEL")
    assert wheel, "scripts/test-wheel sets IPC_WHEEL"
    shutil.copy(wheel, d)
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "-q", "--disable-pip-version-check", "--no-deps", "-d", str(d), "cvc5==1.4.2"],
        check=True,
    )
    for whl in d.glob("*.whl"):
        project = d / "simple" / whl.name.split("-")[0].replace("_", "-").lower()
        project.mkdir(parents=True)
        (project / "index.html").write_text(f'<a href="../../{whl.name}">{whl.name}</a>\n')
    return (d / "simple").as_uri()
