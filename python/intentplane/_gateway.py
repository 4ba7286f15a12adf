"""`Gateway`: this wheel's `ipc serve --stdio` as a Python object. It
carries lines, nothing else: every decision, DENY included, is the
gateway's, with its receipt."""

from __future__ import annotations

import json
import os
import queue
import re
import subprocess
import threading
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Literal, Mapping, Optional, Union

from ._find import find_ipc

PathLike = Union[str, "os.PathLike[str]"]
Outcome = Literal["ALLOW", "PENDING", "DENY", "SHADOW"]

#: a diagnostic code as `ipc` prints it first on stderr (`ipc::serve::no_store`)
_CODE = re.compile(r"\b(ipc(?:::[a-z0-9_]+)+)\b")
#: stderr kept for an error's message (the end of it)
_STDERR_KEPT = 16 * 1024


class GatewayError(Exception):
    """The gateway could not answer: it did not start, it stopped, it did
    not answer in time, a value cannot be written as JSON, or its answer
    cannot be read. `code` names the diagnostic: `ipc::...` as the gateway
    printed it, or `intentplane::start`, `intentplane::exited`,
    `intentplane::timeout`, `intentplane::encode`, `intentplane::answer`,
    `intentplane::closed` when the Python side found it. No decision was
    made for the call that raised it, except after a timeout or an exit,
    where the gateway may have recorded one (its receipt says)."""

    def __init__(self, code: str, message: str, stderr: str = "") -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.stderr = stderr


@dataclass(frozen=True)
class Receipt:
    """Where the decision sits in the hash chain."""

    seq: int
    hash: str


@dataclass(frozen=True)
class Decision:
    """One decision, as `ipc serve --stdio` wrote it (`raw` holds every
    field; docs/gateway.md says what each means)."""

    decision: Outcome
    stage: Optional[str]
    reason: Optional[str]
    hint: Optional[str]
    action: Optional[str]
    operation_hash: Optional[str]
    level: Optional[int]
    approve_by: Optional[str]
    result: Any
    resolved: Optional[dict]
    origins: Optional[dict]
    receipt: Optional[Receipt]
    raw: dict = field(repr=False)
    #: a SHADOW decision (shadow mode): what enforcement would have
    #: decided, `{"decision", "stage", "reason", "level"}`
    would_be: Optional[dict] = None

    @property
    def allowed(self) -> bool:
        """Allowed and executed by the gateway: never in shadow mode."""
        return self.decision == "ALLOW"

    @property
    def shadow(self) -> bool:
        """Shadow mode: recorded, not enforced; see `would_be`."""
        return self.decision == "SHADOW"

    @classmethod
    def from_json(cls, v: Any) -> "Decision":
        if not isinstance(v, dict) or v.get("decision") not in ("ALLOW", "PENDING", "DENY", "SHADOW"):
            raise ValueError(f"not a decision: {v!r:.200}")
        r = v.get("receipt")
        receipt = None
        if r is not None:
            if not (isinstance(r, dict) and isinstance(r.get("seq"), int) and isinstance(r.get("hash"), str)):
                raise ValueError(f"not a receipt: {r!r:.200}")
            receipt = Receipt(seq=r["seq"], hash=r["hash"])
        return cls(
            decision=v["decision"],
            stage=v.get("stage"),
            reason=v.get("reason"),
            hint=v.get("hint"),
            action=v.get("action"),
            operation_hash=v.get("operation_hash"),
            level=v.get("level"),
            approve_by=v.get("approve_by"),
            result=v.get("result"),
            resolved=v.get("resolved"),
            origins=v.get("origins"),
            receipt=receipt,
            raw=v,
            would_be=v.get("would_be"),
        )


def _encode_default(o: Any) -> Any:
    # an exact decimal goes as its text: the gateway reads money from a
    # string exactly, and a float never touches it
    if isinstance(o, Decimal):
        if not o.is_finite():
            raise ValueError(f"`{o}` is not a number the gateway reads")
        return str(o)
    raise TypeError(f"a `{type(o).__name__}` cannot be written as JSON")


class Gateway:
    """This wheel's `ipc serve --stdio`, started with these files; a context
    manager that stops it.

    `bundle`, `world`: the signed bundle and the world file. `store`: the
    SQLite file or `postgres://` URL (else the world's `store`;
    `ephemeral=True` runs on memory on purpose). `mandate`: the token for
    calls that carry none. `bundle_key`: the key the bundle must be signed
    with, when the world pins none. `timeout`: seconds to wait for the
    gateway to start and for each answer (a `GatewayError` after it).
    `ipc`: another binary instead of the wheel's (tests, a build of your
    own); never looked up on the PATH."""

    def __init__(
        self,
        bundle: PathLike,
        world: PathLike,
        store: Optional[str] = None,
        mandate: Optional[PathLike] = None,
        bundle_key: Optional[PathLike] = None,
        ephemeral: bool = False,
        *,
        allow_unsigned: bool = False,
        allow_frozen_clock: bool = False,
        timeout: float = 30.0,
        ipc: Optional[PathLike] = None,
    ) -> None:
        self._timeout = timeout
        self._lock = threading.Lock()
        self._closed = False
        exe = os.fspath(ipc) if ipc is not None else find_ipc()
        cmd = [exe, "serve", "--stdio", "--ready", "--bundle", os.fspath(bundle), "--world", os.fspath(world)]
        if store is not None:
            cmd += ["--store", os.fspath(store)]
        if ephemeral:
            cmd.append("--ephemeral")
        if mandate is not None:
            cmd += ["--mandate", os.fspath(mandate)]
        if bundle_key is not None:
            cmd += ["--bundle-key", os.fspath(bundle_key)]
        if allow_unsigned:
            cmd.append("--allow-unsigned")
        if allow_frozen_clock:
            cmd.append("--allow-frozen-clock")
        env = dict(os.environ, NO_COLOR="1")
        try:
            self._proc = subprocess.Popen(
                cmd,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=env,
            )
        except OSError as e:
            raise GatewayError("intentplane::start", f"cannot start `{exe}`: {e}") from e
        self._answers: "queue.Queue[Optional[bytes]]" = queue.Queue()
        self._stderr = bytearray()
        self._stderr_done = threading.Event()
        threading.Thread(target=self._read_stdout, daemon=True).start()
        threading.Thread(target=self._read_stderr, daemon=True).start()
        line = self._next_line("start")
        try:
            ready = json.loads(line)
        except ValueError:
            ready = None
        if not (isinstance(ready, dict) and ready.get("ready") is True):
            self._kill()
            raise GatewayError("intentplane::answer", f"the gateway did not say it was ready: {line[:200]!r}")
        #: the hash of the bundle the gateway decides with
        self.bundle_hash: str = ready.get("bundle", "")

    # the pipes, read by threads so that every read can time out

    def _read_stdout(self) -> None:
        assert self._proc.stdout is not None
        for line in self._proc.stdout:
            self._answers.put(line)
        self._answers.put(None)

    def _read_stderr(self) -> None:
        assert self._proc.stderr is not None
        for chunk in iter(lambda: self._proc.stderr.read1(4096), b""):  # type: ignore[union-attr]
            self._stderr += chunk
            del self._stderr[:-_STDERR_KEPT]
        self._stderr_done.set()

    def _stderr_text(self) -> str:
        return self._stderr.decode("utf-8", "replace")

    def _next_line(self, what: str) -> bytes:
        try:
            line = self._answers.get(timeout=self._timeout)
        except queue.Empty:
            self._kill()
            raise GatewayError(
                "intentplane::timeout",
                f"no answer from the gateway within {self._timeout} s ({what}); it was stopped",
                self._stderr_text(),
            ) from None
        if line is None:
            raise self._exited(what)
        return line

    def _exited(self, what: str) -> GatewayError:
        self._closed = True
        try:
            rc = self._proc.wait(timeout=self._timeout)
        except subprocess.TimeoutExpired:
            self._kill()
            rc = self._proc.returncode
        self._stderr_done.wait(timeout=5)
        err = self._stderr_text()
        found = _CODE.search(err)
        first = next((ln.strip(" ×│") for ln in err.splitlines() if ln.strip().startswith("×")), "")
        if not first:
            first = next((ln for ln in err.splitlines() if ln.strip()), "no message")
        code = found.group(1) if found else ("intentplane::start" if what == "start" else "intentplane::exited")
        doing = "did not start" if what == "start" else "stopped"
        return GatewayError(code, f"the gateway {doing} (exit code {rc}): {first.strip()}", err)

    def _kill(self) -> None:
        self._closed = True
        if self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait()

    # the API

    def decide(
        self,
        action: str,
        args: Mapping[str, Any],
        mandate: Optional[Union[Mapping[str, Any], PathLike]] = None,
    ) -> Decision:
        """The gateway's decision on the proposal `action` with `args`
        (values as the agent gave them; `Decimal` amounts go as exact
        text). `mandate`: the token (its JSON object, or the path of its
        file) for this call, instead of the gateway's `mandate`."""
        proposal = {"action": action, "args": dict(args)}
        line_obj: dict = proposal
        if mandate is not None:
            token = mandate
            if not isinstance(mandate, Mapping):
                try:
                    with open(os.fspath(mandate), encoding="utf-8") as f:
                        token = json.load(f)
                except (OSError, ValueError) as e:
                    raise GatewayError("intentplane::encode", f"cannot read the mandate `{os.fspath(mandate)}`: {e}") from e
            line_obj = {"proposal": proposal, "mandate": dict(token)}  # type: ignore[arg-type]
        try:
            line = json.dumps(line_obj, allow_nan=False, ensure_ascii=False, separators=(",", ":"), default=_encode_default)
        except (TypeError, ValueError) as e:
            raise GatewayError("intentplane::encode", f"the proposal cannot be written as JSON: {e}") from e
        with self._lock:
            if self._closed:
                raise GatewayError("intentplane::closed", "the gateway is closed")
            assert self._proc.stdin is not None
            try:
                self._proc.stdin.write(line.encode("utf-8") + b"\n")
                self._proc.stdin.flush()
            except (BrokenPipeError, OSError):
                raise self._exited("decide") from None
            answer = self._next_line("decide")
        try:
            return Decision.from_json(json.loads(answer))
        except ValueError as e:
            raise GatewayError("intentplane::answer", f"the gateway's answer cannot be read: {e}") from e

    def close(self) -> None:
        """Ends the input; the gateway finishes what it was given and stops."""
        if self._proc.poll() is not None:
            self._closed = True
            return
        self._closed = True
        try:
            if self._proc.stdin is not None:
                self._proc.stdin.close()
            self._proc.wait(timeout=self._timeout)
        except (OSError, subprocess.TimeoutExpired):
            self._kill()

    def __enter__(self) -> "Gateway":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
