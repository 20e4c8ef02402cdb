"""``python -m mamba_ssm.doctor [--json] [--explain TEXT|-] [--requirements LINE] [--index URL] [--offline]``.

Exit codes: 0 healthy (or --explain found nothing it knows; --requirements printed the file), 1 a problem was
found (--requirements: the line has no wheel here, or nothing the farm serves satisfies a pin of FILE),
2 bad usage (argparse), 3 --explain could not read its input.
"""

from __future__ import annotations

import argparse
import io
import os
import sys
import threading

from ..guard import Untrusted, guard_output, has_hidden, shown

EXIT_HEALTHY, EXIT_PROBLEM, EXIT_USAGE, EXIT_INPUT = 0, 1, 2, 3
# What each means (the docs' exit-code reference is generated from this; tests/test_docs.py checks every EXIT_ is here).
EXIT_CODES = {
    EXIT_HEALTHY: "healthy: every check passed (with --explain: the message matched nothing the doctor knows)",
    EXIT_PROBLEM: "a problem was found; each one is printed with the command that fixes it (with --requirements: the line has no wheel for this environment, and why)",
    EXIT_USAGE: "bad usage (an unknown or malformed argument, an --index / MAMBA_WHEEL_INDEX holding control characters, or with --requirements one that is not one http(s) URL)",
    EXIT_INPUT: "--explain could not read its input (stdin unreadable, over 64 MiB, silent for its first 20 s or open after 2 h, or an empty message); --requirements FILE could not read FILE as a requirements file (unreadable, over 1 MiB, not text)",
}
EXPLAIN_CAP = 64 << 20  # a pasted log; only its first and last KiB are searched (classify.scan_window)
EXPLAIN_FIRST_S = 20.0  # stdin's first bytes (`pip install ... 2>&1 |` prints "Collecting" at once)
EXPLAIN_DEADLINE_S = 7200.0  # all of it: a piped source build prints nothing while it compiles


class _Parser(argparse.ArgumentParser):
    """argparse quotes a bad argument in its message: shown, so a pasted escape sequence is not obeyed."""

    def error(self, message: str):
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"{self.prog}: error: {shown(message)}\n")


def _parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="python -m mamba_ssm.doctor",
        description="Explain why mamba-ssm does not install or import here, and print the command that fixes it.",
    )
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--explain", metavar="TEXT", help="classify a pasted error message instead ('-' reads stdin)")
    p.add_argument("--index", metavar="URL", help="wheel index root (default: MAMBA_WHEEL_INDEX or the project's index)")
    p.add_argument("--offline", action="store_true", help="don't ask the index whether a wheel exists")
    p.add_argument(
        "--requirements", metavar="LINE|FILE",
        help="print a pip requirements file for this torch's cell of LINE (upstream's packages, or this repository's "
        "mamba-ssm), holding the installed torch; exit 1 naming why where the line has no wheel here. A FILE (or - "
        "for stdin: a requirements file, or a pasted `pip install` line) is printed back with each mamba-ssm and "
        "causal-conv1d requirement answered by the farm's pin for this cell, every other line kept",
    )  # fmt: skip
    return p


def _error(message: str, code: int) -> int:
    print(f"error: {shown(message)}", file=sys.stderr)
    return code


def _read_stdin(limit: int, first_s: float, total_s: float) -> str:
    """stdin, at most ``limit`` bytes: its first bytes within ``first_s`` (a FIFO nobody writes to), all of it
    within ``total_s`` (a piped build is silent while it compiles, so the whole read gets far longer). The read
    runs in a thread the doctor stops waiting for, so neither can hang it. Bad UTF-8 is replaced, not refused:
    a log with a stray byte is still a log."""
    got: dict = {"parts": [], "size": 0}
    started = threading.Event()
    try:
        # unbuffered, on its own descriptor: a thread left blocked in it holds no lock the interpreter's exit needs
        raw = io.FileIO(os.dup(sys.stdin.fileno()), "rb")
    except (AttributeError, OSError, ValueError) as e:  # stdin closed or not a file
        raise Untrusted(f"--explain -: cannot read stdin ({e})") from None

    def read() -> None:
        try:
            while block := raw.read(1 << 16):
                started.set()
                got["size"] += len(block)
                if got["size"] > limit:
                    raise Untrusted(f"more than {limit >> 20} MiB")
                got["parts"].append(block)
        except (OSError, ValueError) as e:  # Untrusted is a ValueError
            got["error"] = e
        started.set()

    worker = threading.Thread(target=read, daemon=True)
    worker.start()
    if not started.wait(first_s):
        raise Untrusted(f"--explain -: stdin sent nothing within {first_s:g} s")
    worker.join(total_s)
    if worker.is_alive():
        raise Untrusted(f"--explain -: stdin did not end within {total_s:g} s")
    if "error" in got:
        raise Untrusted(f"--explain -: cannot read stdin ({got['error']})")
    return b"".join(got["parts"]).decode("utf-8", "replace")


def _index_problem(args) -> str | None:
    """--index and MAMBA_WHEEL_INDEX become words of the printed fix: a control character in one could not
    be pasted back exactly (and no index URL holds one), so it is refused before anything is looked up."""
    from .. import prebuilt as _prebuilt

    for what, value in (("--index", args.index), (_prebuilt.ENV_INDEX, os.environ.get(_prebuilt.ENV_INDEX))):
        if value is not None and has_hidden(value):
            return f"{what} {shown(repr(value), 200)} holds control characters; give the index URL or folder itself"
    return None


def _requirements_facts(args) -> dict | int:
    """The facts --requirements pins from (both its forms), or the exit code of an error already printed: the
    index checked as one URL first, then torch imported in a child process, bounded (only its facts are needed,
    never its kernels)."""
    from .facts import platform_facts, python_facts, torch_facts_bounded
    from .requirements import BadIndex, checked_index

    try:
        checked_index(args.index)
    except BadIndex as e:
        return _error(f"{e}; give the index root's URL", EXIT_USAGE)
    try:
        torch = torch_facts_bounded()
    except Untrusted as e:
        return _error(str(e), EXIT_PROBLEM)
    return {"python": python_facts(), "platform": platform_facts(), "torch": torch}


def _own_pins(args) -> int:
    """--requirements FILE: the user's own requirements answered (pins.py)."""
    from .pins import InputError, PinError, answer, read_input
    from .requirements import NoCell

    try:
        text, what = read_input(args.requirements)
    except InputError as e:
        return _error(str(e), EXIT_INPUT)
    facts = _requirements_facts(args)
    if isinstance(facts, int):
        return facts
    try:
        out, notes = answer(text, facts, args.index, what)
    except InputError as e:
        return _error(str(e), EXIT_INPUT)
    except (PinError, NoCell) as e:
        return _error(str(e), EXIT_PROBLEM)
    for note in notes:
        print(f"mamba-doctor: {shown(note)}", file=sys.stderr)
    sys.stdout.write(out)
    return EXIT_HEALTHY


def main(argv: list[str] | None = None) -> int:
    guard_output()  # controls, bidi overrides and surrogates escaped; an ascii terminal gets escapes too
    args = _parser().parse_args(argv)
    from . import report

    problem = _index_problem(args)
    if problem:
        return _error(problem, EXIT_USAGE)
    if args.requirements and args.requirements not in ("upstream", "checkout"):
        return _own_pins(args)
    if args.requirements:
        from .requirements import NoCell, requirements

        facts = _requirements_facts(args)
        if isinstance(facts, int):
            return facts
        try:
            sys.stdout.write(requirements(args.requirements, facts, args.index))
        except NoCell as e:
            return _error(str(e), EXIT_PROBLEM)
        return EXIT_HEALTHY
    if args.explain is not None:
        from .classify import Context, classify, scan_window

        if args.explain == "-":
            try:
                text = _read_stdin(EXPLAIN_CAP, EXPLAIN_FIRST_S, EXPLAIN_DEADLINE_S)
            except Untrusted as e:
                return _error(f"{e}; paste the message as an argument, or pipe in a file", EXIT_INPUT)
        else:
            text = args.explain
        if not text.strip():
            return _error("--explain got an empty message; pass the error text (or '-' and pipe it in)", EXIT_INPUT)
        diags = classify(text, Context(index_url=args.index))
        sys.stdout.write(report.render_explain(diags, args.json, note=scan_window(text)[1]))
        return EXIT_PROBLEM if diags else EXIT_HEALTHY

    from .checks import PROBLEM, run_checks
    from .facts import gather

    facts = gather()
    findings, extra = run_checks(facts, index_url=args.index, offline=args.offline)
    code = EXIT_PROBLEM if any(f.verdict == PROBLEM for f in findings) else EXIT_HEALTHY
    sys.stdout.write(report.render_json(facts, findings, extra, code) if args.json else report.render_text(facts, findings, extra))
    return code
