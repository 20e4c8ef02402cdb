"""``python -m mamba_ssm.doctor [--json] [--explain TEXT|-] [--index URL] [--offline]``.

Exit codes: 0 healthy (or --explain found nothing it knows), 1 a problem was found,
2 bad usage (argparse), 3 --explain could not read its input.
"""

from __future__ import annotations

import argparse
import sys

EXIT_HEALTHY, EXIT_PROBLEM, EXIT_USAGE, EXIT_INPUT = 0, 1, 2, 3
# What each means (the docs' exit-code reference is generated from this; tests/test_docs.py checks every EXIT_ is here).
EXIT_CODES = {
    EXIT_HEALTHY: "healthy: every check passed (with --explain: the message matched nothing the doctor knows)",
    EXIT_PROBLEM: "a problem was found; each one is printed with the command that fixes it",
    EXIT_USAGE: "bad usage (an unknown or malformed argument)",
    EXIT_INPUT: "--explain could not read its input (stdin unreadable, or an empty message)",
}


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m mamba_ssm.doctor",
        description="Explain why mamba-ssm does not install or import here, and print the command that fixes it.",
    )
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--explain", metavar="TEXT", help="classify a pasted error message instead ('-' reads stdin)")
    p.add_argument("--index", metavar="URL", help="wheel index root (default: MAMBA_WHEEL_INDEX or the project's index)")
    p.add_argument("--offline", action="store_true", help="don't ask the index whether a wheel exists")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    from . import report

    if args.explain is not None:
        from .classify import Context, classify

        if args.explain == "-":
            try:
                text = sys.stdin.read()
            except (OSError, UnicodeDecodeError) as e:
                print(f"doctor: --explain -: cannot read stdin ({e}); paste the message as an argument instead", file=sys.stderr)
                return EXIT_INPUT
        else:
            text = args.explain
        if not text.strip():
            print("doctor: --explain got an empty message; pass the error text (or '-' and pipe it in)", file=sys.stderr)
            return EXIT_INPUT
        diags = classify(text, Context(index_url=args.index))
        sys.stdout.write(report.render_explain(diags, args.json))
        return EXIT_PROBLEM if diags else EXIT_HEALTHY

    from .checks import PROBLEM, run_checks
    from .facts import gather

    facts = gather()
    findings, extra = run_checks(facts, index_url=args.index, offline=args.offline)
    code = EXIT_PROBLEM if any(f.verdict == PROBLEM for f in findings) else EXIT_HEALTHY
    sys.stdout.write(report.render_json(facts, findings, extra, code) if args.json else report.render_text(facts, findings, extra))
    return code
