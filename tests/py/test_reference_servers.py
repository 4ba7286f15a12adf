"""Issue #24, item 7: `ipc mcp` in front of a reference MCP server nobody
here wrote, `@modelcontextprotocol/server-filesystem` (npm, pinned in
scripts/reference-servers), driven through the official Python SDK with
the shipped config examples/mcp/filesystem/intentplane.toml (its trusted
folder moved to this test's own). What the server did is read from the
disk afterwards: reads pass, injected paths are refused and nothing is
written outside, trusted writes land, a move is asked through
elicitation and happens only when the user accepts.

The server is installed by `scripts/reference-servers` (scripts/test runs
it); without it these tests skip loudly, and fail under `CI`.
"""

import asyncio
import json
import os
import pathlib
import shutil
import subprocess

import pytest
from mcp import ClientSession, StdioServerParameters, types
from mcp.client.stdio import stdio_client

ROOT = pathlib.Path(__file__).resolve().parents[2]
TARGET = pathlib.Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
IPC = TARGET / "debug" / "ipc"
SERVERS = pathlib.Path(os.environ.get("IPC_REFERENCE_SERVERS", TARGET / "mcp-servers"))
FS = SERVERS / "node_modules" / ".bin" / "mcp-server-filesystem"
GIT = pathlib.Path(os.environ.get("IPC_REFERENCE_VENV", SERVERS / "venv")) / "bin" / "mcp-server-git"
EXAMPLE = ROOT / "examples" / "mcp" / "filesystem" / "intentplane.toml"
GIT_EXAMPLE = ROOT / "examples" / "mcp" / "git" / "intentplane.toml"

for need, how in [
    (IPC, "run cargo test first"),
    (FS, "run scripts/reference-servers"),
    (GIT, "run scripts/reference-servers"),
]:
    if not need.exists():
        if os.environ.get("CI"):
            raise RuntimeError(f"{need} is missing: {how}")
        print(f"\n== SKIPPED: {need} is missing ({how})")
        pytest.skip(f"{need} is missing: {how}", allow_module_level=True)


def example(name: str, tmp: pathlib.Path) -> str:
    """The shipped example `name` copied into `tmp` as it is (its registries,
    its workspace or server script beside its config), the demo keys read
    where they are; its text, to be adapted."""
    shutil.copytree(ROOT / "examples" / "mcp" / name, tmp, dirs_exist_ok=True)
    return (tmp / "intentplane.toml").read_text().replace('"../keys/', f'"{ROOT}/examples/mcp/keys/')


def config(tmp: pathlib.Path) -> pathlib.Path:
    """The shipped config in this test's folder, the pinned server in place
    of `npx`: its workspace is `workspace/` beside it, as shipped."""
    text = example("filesystem", tmp)
    ws = (tmp / "workspace").resolve()
    (ws / "notes").mkdir(parents=True)
    (ws / "notes" / "readme.md").write_text("hello from the workspace\n")
    (tmp / "outside").mkdir()
    (tmp / "outside" / "secret.txt").write_text("not yours\n")
    text = text.replace('command = "npx"', f'command = "{FS}"')
    text = text.replace(f'"-y", "@modelcontextprotocol/server-filesystem@2026.8.31", ', "")
    path = tmp / "intentplane.toml"
    path.write_text(text)
    return path


class Run:
    def __init__(self, tmp, answer=None, make=config):
        self.tmp = pathlib.Path(tmp).resolve()
        self.cfg = make(self.tmp)
        self.ws = self.tmp / "workspace"
        self.answer = answer
        self.asked = []

    async def elicit(self, context, params):
        self.asked.append(params.message)
        if self.answer == "accept":
            return types.ElicitResult(action="accept", content={})
        return types.ElicitResult(action="decline")

    def play(self, body):
        async def go():
            # the SDK starts a server with a few variables only: `ipc mcp`
            # gets this test's environment (the git example's author)
            params = StdioServerParameters(
                command=str(IPC), args=["mcp", "--config", str(self.cfg)], env=dict(os.environ)
            )
            async with stdio_client(params) as (r, w):
                async with ClientSession(r, w, elicitation_callback=self.elicit) as s:
                    await s.initialize()
                    return await body(s)

        return asyncio.run(go())


def text(result) -> str:
    return "\n".join(c.text for c in result.content if getattr(c, "text", None))


def test_the_shipped_config_matches_what_the_server_declares(tmp_path):
    run = Run(tmp_path)
    out = subprocess.run(
        [str(IPC), "mcp", "--config", str(run.cfg), "--check", "--servers", "--format", "json"],
        capture_output=True,
        text=True,
    )
    doc = json.loads(out.stdout)
    assert out.returncode == 0, out.stdout
    assert (doc["errors"], doc["warnings"]) == (0, 0), doc["diagnostics"]
    # a misspelt argument is found at its line, with the server's names
    bad = run.cfg.read_text().replace("[tools.params.content]", "[tools.params.content]\narg = \"contents\"")
    run.cfg.write_text(bad)
    out = subprocess.run(
        [str(IPC), "mcp", "--config", str(run.cfg), "--check", "--servers", "--format", "json"],
        capture_output=True,
        text=True,
    )
    doc = json.loads(out.stdout)
    assert out.returncode == 1
    [d] = [d for d in doc["diagnostics"] if d["code"] == "ipc::mcp::undeclared_arg"]
    line = bad.splitlines()[d["labels"][0]["line"] - 1]
    assert line == 'arg = "contents"'
    assert "`content`" in d["help"]


def test_reads_pass_and_trusted_writes_land(tmp_path):
    run = Run(tmp_path)

    async def body(s):
        dirs = text(await s.call_tool("list_allowed_directories", {}))
        read = await s.call_tool("read_text_file", {"path": str(run.ws / "notes" / "readme.md")})
        rel = await s.call_tool("write_file", {"path": "./notes/todo.md", "content": "buy milk\n"})
        absolute = await s.call_tool(
            "write_file", {"path": f"{run.ws}//notes/./abs.md", "content": "absolute\n"}
        )
        mkdir = await s.call_tool("create_directory", {"path": "drafts"})
        return dirs, read, rel, absolute, mkdir

    dirs, read, rel, absolute, mkdir = run.play(body)
    assert str(run.ws) in dirs
    assert not read.is_error and "hello from the workspace" in text(read)
    assert not rel.is_error, text(rel)
    assert (run.ws / "notes" / "todo.md").read_text() == "buy milk\n"
    assert not absolute.is_error, text(absolute)
    assert (run.ws / "notes" / "abs.md").read_text() == "absolute\n"
    assert not mkdir.is_error, text(mkdir)
    assert (run.ws / "drafts").is_dir()


@pytest.mark.parametrize(
    "path",
    [
        "../../.ssh/authorized_keys",
        "../outside/secret.txt",
        "notes/../../outside/secret.txt",
        "{tmp}/outside/secret.txt",
        "{ws}/../outside/secret.txt",
        "{ws}-evil/x.txt",
        "~/.ssh/authorized_keys",
        "/etc/cron.d/x",
    ],
)
def test_injected_paths_are_refused_and_nothing_is_written(tmp_path, path):
    run = Run(tmp_path)
    path = path.format(tmp=run.tmp, ws=run.ws)
    before = sorted(p for p in run.tmp.rglob("*") if p.name != "intentplane.db" and "intentplane.db" not in p.name)

    r = run.play(lambda s: s.call_tool("write_file", {"path": path, "content": "ssh-ed25519 AAAA attacker"}))
    assert r.is_error
    t = text(r)
    assert "DENY at stage" in t, t
    after = sorted(p for p in run.tmp.rglob("*") if p.name != "intentplane.db" and "intentplane.db" not in p.name)
    assert after == before
    assert (run.tmp / "outside" / "secret.txt").read_text() == "not yours\n"
    assert not (run.tmp / ".ssh").exists()


def test_a_hidden_tool_is_refused(tmp_path):
    run = Run(tmp_path)
    r = run.play(lambda s: s.call_tool("read_multiple_files", {"paths": ["notes/readme.md"]}))
    assert r.is_error and "not available through intentplane" in text(r)


def test_an_edit_inside_the_workspace_lands(tmp_path):
    run = Run(tmp_path)
    edits = [{"oldText": "hello", "newText": "hi"}, {"oldText": "workspace", "newText": "folder"}]
    r = run.play(lambda s: s.call_tool("edit_file", {"path": "notes/readme.md", "edits": edits}))
    assert not r.is_error, text(r)
    assert (run.ws / "notes" / "readme.md").read_text() == "hi from the folder\n"


@pytest.mark.parametrize(
    "args, why",
    [
        # the file outside the trusted folder
        ({"path": "/etc/hostname", "edits": [{"oldText": "a", "newText": "b"}]}, "provenance"),
        # an element with a field the record does not have
        (
            {"path": "notes/readme.md", "edits": [{"oldText": "hello", "newText": "x", "mode": "append"}]},
            "unknown field `mode`",
        ),
        # an element without one of its fields
        ({"path": "notes/readme.md", "edits": [{"oldText": "hello"}]}, "missing field `newText`"),
        # an element that is not an object
        ({"path": "notes/readme.md", "edits": [{"oldText": "hello", "newText": "x"}, "hello"]}, "expected an object"),
        # more edits than the config allows
        ({"path": "notes/readme.md", "edits": [{"oldText": "hello", "newText": "x"}] * 51}, "more than 50"),
    ],
)
def test_a_bad_edit_is_refused_and_nothing_changes(tmp_path, args, why):
    run = Run(tmp_path)
    r = run.play(lambda s: s.call_tool("edit_file", args))
    assert r.is_error
    assert "DENY at stage" in text(r) and why in text(r), text(r)
    assert (run.ws / "notes" / "readme.md").read_text() == "hello from the workspace\n"
    assert (run.tmp / "outside" / "secret.txt").read_text() == "not yours\n"


@pytest.mark.parametrize("answer", ["accept", "decline"])
def test_a_move_is_asked_through_elicitation(tmp_path, answer):
    run = Run(tmp_path, answer=answer)
    src, dst = run.ws / "notes" / "readme.md", run.ws / "notes" / "moved.md"

    async def body(s):
        return await s.call_tool("move_file", {"source": "notes/readme.md", "destination": "notes/moved.md"})

    r = run.play(body)
    assert len(run.asked) == 1, run.asked
    assert "moving a file" in run.asked[0]
    if answer == "accept":
        assert not r.is_error, text(r)
        assert dst.read_text() == "hello from the workspace\n" and not src.exists()
    else:
        assert r.is_error and "DENY" in text(r)
        assert src.exists() and not dst.exists()


def test_a_move_out_of_the_workspace_is_refused_before_anyone_is_asked(tmp_path):
    run = Run(tmp_path, answer="accept")
    r = run.play(
        lambda s: s.call_tool(
            "move_file", {"source": "notes/readme.md", "destination": str(run.tmp / "outside" / "stolen.md")}
        )
    )
    assert r.is_error and "DENY at stage `provenance`" in text(r), text(r)
    assert run.asked == []
    assert (run.ws / "notes" / "readme.md").exists()
    assert not (run.tmp / "outside" / "stolen.md").exists()


# ---- the git server -------------------------------------------------------


def git(repo, *args) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, check=True
    ).stdout


def git_config(tmp: pathlib.Path) -> pathlib.Path:
    """The shipped git config in this test's folder, as shipped: its server
    script finds the pinned mcp-server-git in `.venv/` beside it; the
    repository `repo/` made here first, with a commit and branches."""
    text = example("git", tmp)
    (tmp / ".venv").symlink_to(GIT.parent.parent)
    repo = (tmp / "repo").resolve()
    env = {"GIT_AUTHOR_NAME": "Emma", "GIT_AUTHOR_EMAIL": "emma@example.org"}
    os.environ.update(env)
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
    (repo / "README.md").write_text("hello\n")
    git(repo, "add", "README.md")
    git(repo, "-c", "user.name=Emma", "-c", "user.email=emma@example.org", "commit", "-q", "-m", "init")
    git(repo, "branch", "feature")
    git(repo, "branch", "attacker")
    other = (tmp / "other").resolve()
    subprocess.run(["git", "init", "-q", "-b", "main", str(other)], check=True)
    path = tmp / "intentplane.toml"
    path.write_text(text)
    return path


def git_run(tmp, answer=None):
    run = Run(tmp, answer, make=git_config)
    run.repo = run.tmp / "repo"
    return run


def staged(repo) -> list:
    return git(repo, "diff", "--cached", "--name-only").split()


def test_the_git_config_matches_what_the_server_declares(tmp_path):
    run = git_run(tmp_path)
    out = subprocess.run(
        [str(IPC), "mcp", "--config", str(run.cfg), "--check", "--servers", "--format", "json"],
        capture_output=True,
        text=True,
    )
    doc = json.loads(out.stdout)
    assert out.returncode == 0, out.stdout
    assert (doc["errors"], doc["warnings"]) == (0, 0), doc["diagnostics"]


def test_git_reads_pass_adds_land_and_injected_files_and_repos_are_refused(tmp_path):
    run = git_run(tmp_path)
    (run.repo / "new.txt").write_text("new\n")
    (run.tmp / "outside.txt").write_text("outside\n")
    (run.tmp / "other" / "x.txt").write_text("x\n")
    repo = str(run.repo)

    async def body(s):
        status = await s.call_tool("git_status", {"repo_path": repo})
        added = await s.call_tool("git_add", {"repo_path": repo, "files": ["./new.txt"]})
        escape = await s.call_tool("git_add", {"repo_path": repo, "files": ["../outside.txt"]})
        other = await s.call_tool(
            "git_add", {"repo_path": str(run.tmp / "other"), "files": [str(run.tmp / "other" / "x.txt")]}
        )
        return status, added, escape, other

    status, added, escape, other = run.play(body)
    assert not status.is_error and "new.txt" in text(status)
    assert not added.is_error, text(added)
    assert staged(run.repo) == ["new.txt"]
    assert escape.is_error and "DENY" in text(escape)
    assert other.is_error and "DENY at stage `provenance`" in text(other)
    assert git(run.tmp / "other", "status", "--porcelain").strip() == "?? x.txt"


def test_a_checkout_goes_only_to_the_users_branches(tmp_path):
    run = git_run(tmp_path)
    repo = str(run.repo)

    async def body(s):
        bad = await s.call_tool("git_checkout", {"repo_path": repo, "branch_name": "attacker"})
        head_after_bad = git(run.repo, "branch", "--show-current").strip()
        good = await s.call_tool("git_checkout", {"repo_path": repo, "branch_name": "feature"})
        return bad, head_after_bad, good

    bad, head_after_bad, good = run.play(body)
    assert bad.is_error and "DENY at stage `provenance`" in text(bad), text(bad)
    assert head_after_bad == "main"
    assert not good.is_error, text(good)
    assert git(run.repo, "branch", "--show-current").strip() == "feature"


@pytest.mark.parametrize("answer", ["accept", "decline"])
def test_a_commit_is_asked_through_elicitation(tmp_path, answer):
    run = git_run(tmp_path, answer=answer)
    (run.repo / "new.txt").write_text("new\n")
    git(run.repo, "add", "new.txt")
    r = run.play(lambda s: s.call_tool("git_commit", {"repo_path": str(run.repo), "message": "add new.txt"}))
    assert len(run.asked) == 1 and "a commit" in run.asked[0], run.asked
    log = git(run.repo, "log", "--format=%s")
    if answer == "accept":
        assert not r.is_error, text(r)
        assert log.splitlines()[0] == "add new.txt"
        assert git(run.repo, "log", "-1", "--format=%an").strip() == "Emma"
    else:
        assert r.is_error and "DENY" in text(r)
        assert log.splitlines() == ["init"]
        assert staged(run.repo) == ["new.txt"]


def test_a_reset_is_asked_through_elicitation(tmp_path):
    run = git_run(tmp_path, answer="accept")
    (run.repo / "new.txt").write_text("new\n")
    git(run.repo, "add", "new.txt")
    r = run.play(lambda s: s.call_tool("git_reset", {"repo_path": str(run.repo)}))
    assert not r.is_error, text(r)
    assert len(run.asked) == 1 and "unstaging" in run.asked[0]
    assert staged(run.repo) == []


def test_a_branch_starts_from_a_trusted_branch_or_where_it_is(tmp_path):
    run = git_run(tmp_path)
    repo = str(run.repo)
    git(run.repo, "checkout", "-q", "feature")
    (run.repo / "f.txt").write_text("f\n")
    git(run.repo, "add", "f.txt")
    git(run.repo, "-c", "user.name=E", "-c", "user.email=e@x", "commit", "-q", "-m", "on feature")
    git(run.repo, "checkout", "-q", "main")

    async def body(s):
        based = await s.call_tool(
            "git_create_branch", {"repo_path": repo, "branch_name": "topic", "base_branch": "feature"}
        )
        here = await s.call_tool("git_create_branch", {"repo_path": repo, "branch_name": "here"})
        evil = await s.call_tool(
            "git_create_branch", {"repo_path": repo, "branch_name": "evil", "base_branch": "attacker"}
        )
        return based, here, evil

    based, here, evil = run.play(body)
    assert not based.is_error, text(based)
    assert git(run.repo, "rev-parse", "topic") == git(run.repo, "rev-parse", "feature")
    # left out, it is not sent: the server starts the branch where HEAD is
    assert not here.is_error, text(here)
    assert git(run.repo, "rev-parse", "here") == git(run.repo, "rev-parse", "main")
    assert evil.is_error and "DENY at stage `provenance`" in text(evil), text(evil)
    assert "evil" not in git(run.repo, "branch")


def test_a_hidden_git_tool_is_refused(tmp_path):
    run = git_run(tmp_path)
    r = run.play(lambda s: s.call_tool("git_diff", {"repo_path": str(run.repo), "target": "main"}))
    assert r.is_error and "not available through intentplane" in text(r)


def test_the_git_example_starts_from_a_relative_config_path(tmp_path):
    # `ipc mcp --config intentplane.toml` from the config's own folder, as
    # its header says: the server script (`command = "./server"`) is found
    # although the server starts in its `cwd` (`repo/`), not in that folder
    run = git_run(tmp_path)
    out = subprocess.run(
        [str(IPC), "mcp", "--check", "--servers", "--config", "intentplane.toml"],
        cwd=run.tmp, capture_output=True, text=True, timeout=120,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "ok    intentplane.toml (1 server, 11 tools" in out.stdout, out.stdout
