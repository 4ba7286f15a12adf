"""`intentplane-cvc5`: the cvc5 solver for a pip install, over PyPI's
`cvc5` wheel (its library and SMT-LIB parser; the wheel has no
executable). It speaks what `ipc` sends a solver (cedar-policy-symcc's
`LocalSolver`: SMT-LIB 2.6 commands on stdin, each command's answer on
stdout, flushed), as `cvc5 --lang smt` does: every command is parsed and
run by cvc5 itself (`InputParser`, `Command.invoke`); this file only
carries text. Options as cvc5's: `--lang smt` (the only language), and
`--NAME=VALUE` set as the solver option NAME (`--tlimit-per=60000`).

`ipc` finds it beside itself (docs/install.md, "The solver"); `CVC5`
and a `cvc5` on the PATH come first."""

from __future__ import annotations

import sys
from typing import Iterator, List, Optional, Tuple


def _options(argv: List[str]) -> List[Tuple[str, str]]:
    out: List[Tuple[str, str]] = []
    i = 0
    while i < len(argv):
        a = argv[i]
        if a in ("--lang", "--input-language"):
            lang = argv[i + 1] if i + 1 < len(argv) else ""
            if lang not in ("smt", "smt2", "smtlib2.6", "smt2.6"):
                raise ValueError(f"`{lang}` is not a language this launcher reads (it reads `smt`)")
            i += 2
            continue
        if a.startswith("--lang=") or a.startswith("--input-language="):
            i += 1
            continue
        if not a.startswith("--"):
            raise ValueError(f"`{a}` is not an option (`--NAME=VALUE`)")
        name, _, value = a[2:].partition("=")
        out.append((name, value or "true"))
        i += 1
    return out


def _commands(lines: Iterator[str]) -> Iterator[str]:
    """One top-level command at a time out of the input: text up to where
    its parentheses close, outside strings, quoted symbols and comments
    (several on a line are several commands)."""
    buf: List[str] = []
    depth = 0
    in_str = in_sym = False
    for line in lines:
        start = 0
        j = 0
        while j < len(line):
            c = line[j]
            if in_str:
                if c == '"':
                    if line[j + 1 : j + 2] == '"':
                        j += 1
                    else:
                        in_str = False
            elif in_sym:
                if c == "|":
                    in_sym = False
            elif c == ";":
                break
            elif c == '"':
                in_str = True
            elif c == "|":
                in_sym = True
            elif c == "(":
                depth += 1
            elif c == ")":
                depth -= 1
                if depth <= 0:
                    depth = 0
                    buf.append(line[start : j + 1])
                    yield "".join(buf) + "\n"
                    buf = []
                    start = j + 1
            j += 1
        rest = line[start:j]
        if depth > 0 or in_str or in_sym:
            buf.append(line[start:])
        elif rest.strip():
            # an atom outside parentheses: cvc5 says what is wrong with it
            yield rest + "\n"


def _error(e: Exception) -> str:
    return '(error "' + str(e).replace('"', "'") + '")\n'


def main(argv: Optional[List[str]] = None) -> int:
    try:
        import cvc5
    except ImportError:
        print("error: the Python package `cvc5` is not installed (`pip install cvc5`)", file=sys.stderr)
        return 1
    args = sys.argv[1:] if argv is None else argv
    if "--version" in args:
        tm = cvc5.TermManager()
        version = cvc5.Solver(tm).getVersion()
        if isinstance(version, bytes):
            version = version.decode("utf-8", "replace")
        print(f"This is cvc5 version {version} (PyPI cvc5, through intentplane-cvc5)")
        return 0
    try:
        opts = _options(args)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    tm = cvc5.TermManager()

    def fresh():
        """A new solver with the command line's options, its symbols and
        parser: what `(reset)` makes, as cvc5's own driver does."""
        solver = cvc5.Solver(tm)
        for name, value in opts:
            solver.setOption(name, value)
        sm = cvc5.SymbolManager(tm)
        return solver, sm, cvc5.InputParser(solver, sm)

    try:
        solver, sm, parser = fresh()
    except Exception as e:  # cvc5 raises its own error types
        print(f"error: {e}", file=sys.stderr)
        return 1
    out = sys.stdout
    for text in _commands(iter(sys.stdin.readline, "")):
        # a new input for each command (cvc5 drops its input on some
        # commands, `set-option` before `set-logic`); what was declared
        # stays with the symbol manager
        parser.setIncrementalStringInput(cvc5.InputLanguage.SMT_LIB_2_6, "stdin")
        parser.appendIncrementalStringInput(text)
        while True:
            try:
                cmd = parser.nextCommand()
            except Exception as e:
                # as cvc5 answers a command it cannot parse
                out.write(_error(e))
                out.flush()
                break
            if cmd.isNull():
                break
            name = cmd.getCommandName()
            if name == "exit":
                return 0
            if name == "reset":
                solver, sm, parser = fresh()
                break
            try:
                answer = cmd.invoke(solver, sm)
            except Exception as e:
                answer = _error(e)
            if answer:
                out.write(answer)
                out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
