"""Issue #36, item 2: the wheel's `ipc` on a machine with only Python:
the same command `cargo install` gives, every feature, and the solver
pip installed beside it (`intentplane-cvc5` over PyPI's cvc5)."""

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib

from conftest import BIN, IPC, ROOT, ipc


def test_no_toolchain_and_no_system_solver_on_the_path():
    # what the rest of this file proves is proven without them
    assert shutil.which("cargo") is None, os.environ["PATH"]
    assert shutil.which("cvc5") is None, os.environ["PATH"]
    assert "CVC5" not in os.environ
    assert IPC.is_file() and (BIN / "intentplane-cvc5").is_file()


def test_version_is_the_crates():
    version = tomllib.loads((ROOT / "Cargo.toml").read_text())["package"]["version"]
    assert ipc("--version").stdout.strip() == f"ipc {version}"


def test_demo_runs_on_the_embedded_store(tmp_path):
    doc = json.loads(ipc("demo", "--format", "json", cwd=tmp_path).stdout)
    decisions = [s["decision"]["decision"] for s in doc["steps"] if "decision" in s]
    assert decisions[0] == "DENY" and "ALLOW" in decisions, decisions


def test_demo_mcp_runs_through_the_proxy(tmp_path):
    doc = json.loads(ipc("demo", "mcp", "--format", "json", cwd=tmp_path).stdout)
    assert doc["steps"], doc


def test_the_wheels_solver_proves_the_guarantees(bank):
    # the session's build proved them; again, to read the counts
    out = ipc("build", "packs/bank", "-o", "again.json", "--format", "json", cwd=bank)
    doc = json.loads(out.stdout)
    outcomes = {g["outcome"] for g in doc["guarantees"]}
    assert outcomes == {"proven"} and len(doc["guarantees"]) == 17, doc["guarantees"]


def test_the_wheels_solver_finds_a_counterexample(tmp_path):
    # a pack whose guarantee does not hold: violated (a counterexample
    # scenario), never merely unproven
    shutil.copytree(ROOT / "tests" / "fixtures" / "guarantee" / "sibling", tmp_path / "sibling")
    out = ipc("build", "sibling", "-o", "b.json", "--format", "json", cwd=tmp_path, check=False)
    assert out.returncode == 1, out.stderr
    doc = json.loads(out.stdout)
    codes = {d["code"] for d in doc["diagnostics"]}
    assert codes == {"ipc::guarantee_violated"}, doc["diagnostics"]


def test_mutation_kills_every_mutant_with_the_wheels_solver(bank):
    doc = json.loads(ipc("mutate", "packs/bank", "--format", "json", cwd=bank).stdout)
    statuses = {m["status"] for p in doc["packs"] for m in p["mutants"]}
    assert doc["ok"] and statuses <= {"killed", "equivalent"}, statuses


def test_the_solver_launcher_speaks_smtlib():
    script = "(set-option :produce-models true)(set-logic ALL)\n(declare-const x Int)\n(assert (> x 3))\n(check-sat)\n(get-model)\n(reset)(set-logic ALL)\n(check-sat)\n"
    out = subprocess.run(
        [str(BIN / "intentplane-cvc5"), "--lang", "smt", "--tlimit-per=60000"],
        input=script, capture_output=True, text=True, timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert re.fullmatch(r"sat\n\(\n\(define-fun x \(\) Int \d+\)\n\)\nsat\n", out.stdout), out.stdout


def test_the_launcher_refuses_another_language():
    out = subprocess.run([str(BIN / "intentplane-cvc5"), "--lang", "tptp"], input="", capture_output=True, text=True)
    assert out.returncode == 1 and "tptp" in out.stderr


def test_uv_tool_install_gives_the_same_ipc(index, tmp_path):
    # `uv tool install intentplane`, from a local index in place of PyPI:
    # the tool's `ipc` and its solver, beside each other in uv's bin folder
    env = {
        "PATH": str(BIN),
        "HOME": str(tmp_path),
        "UV_DEFAULT_INDEX": index,
        "UV_CACHE_DIR": str(tmp_path / "cache"),
        "UV_TOOL_DIR": str(tmp_path / "tools"),
        "UV_TOOL_BIN_DIR": str(tmp_path / "bin"),
        "UV_PYTHON": sys.executable,
        "UV_NO_PROGRESS": "1",
    }
    out = subprocess.run([str(BIN / "uv"), "tool", "install", "intentplane"], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    tool_ipc = tmp_path / "bin" / "ipc"
    assert subprocess.run([str(tool_ipc), "--version"], capture_output=True, text=True).stdout == ipc("--version").stdout
    # its guarantees proven by the solver uv installed with it
    shutil.copytree(ROOT / "packs" / "bank", tmp_path / "bank")
    env = {"PATH": str(tmp_path / "bin"), "HOME": str(tmp_path)}
    out = subprocess.run([str(tool_ipc), "build", "bank", "-o", "b.json"], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert out.returncode == 0 and "17 proven" in out.stdout, out.stdout + out.stderr
