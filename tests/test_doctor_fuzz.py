"""Fuzzing the doctor's text paths: the ``--explain`` classifier and the report printer, with generated
text built from the rules' own near-misses, escape sequences and arbitrary Unicode.

The property: a result (never an exception), no raw control or bidi character in what is printed, JSON that
parses back to the same data, a printed command that splits back to the exact words, and a bounded time per
input (hypothesis' deadline). A short run is in the CI set; ``--run-slow`` runs many more examples.
"""

from __future__ import annotations

import json
import shlex

import pytest
from hostilekit import FAKE_LINE, raw_hidden
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_doctor_hostile import adversarial_units
from wheelmaker import V

from mamba_ssm.doctor import classify, report
from mamba_ssm.doctor.checks import run_checks
from mamba_ssm.doctor.classify import Context, install_line, scan_window
from mamba_ssm.guard import has_hidden

FRAGMENTS = [*adversarial_units().values(), FAKE_LINE, "\r", "\x1b[", "\x00", "\u202e", "\u2028", "\ud800", "\n", "'", '"']
FRAGMENTS += ["No module named ", "torch", "pip-build-env", "undefined symbol: ", "_ZN3c10", "Ss", "__cxx11", "/bin/nvcc'"]
pasted = st.lists(st.one_of(st.sampled_from(FRAGMENTS), st.text(max_size=40)), max_size=40).map("".join)
value = st.one_of(st.text(max_size=60), st.sampled_from(FRAGMENTS))

FAST = settings(max_examples=120, deadline=2000, suppress_health_check=[HealthCheck.too_slow], derandomize=True)
LONG = settings(max_examples=4000, deadline=2000, suppress_health_check=[HealthCheck.too_slow])


def _explain_property(text: str, index: str | None) -> None:
    diags = classify(text, Context(index_url=index))
    note = scan_window(text)[1]
    shown_text = report.render_explain(diags, False, note)
    assert not raw_hidden(shown_text), raw_hidden(shown_text)
    doc = report.render_explain(diags, True, note)
    assert not raw_hidden(doc.replace("\n", ""))
    assert json.loads(doc)["diagnoses"] == [d.as_dict() for d in diags]  # the data is kept, escaped


def _command_property(index: str) -> None:
    ctx = Context(variant_key="cu12-torch2.6-cxx11abiFALSE", variant_label="cu12torch2.6cxx11abiFALSE",
                  mamba_version=V, index_url=index, python="/usr/bin/python3")  # fmt: skip
    line = install_line(ctx)
    assert not raw_hidden(line)
    if not has_hidden(index) and index.strip() and "://" in index:  # the CLI refuses the others before printing
        assert shlex.split(line)[-1] == index.rstrip("/") + "/cu12-torch2.6-cxx11abiFALSE/"


def _report_property(words: list[str]) -> None:
    w = iter(words * 40)
    facts = {
        "python": {"version": next(w), "tag": next(w), "executable": next(w)},
        "platform": {"platform": next(w), "glibc": next(w)},
        "torch": {"installed": True, "version": next(w), "cuda": next(w), "cxx11abi": True,
                  "variant": {"key": next(w), "label": next(w)}, "gpus": [{"index": 0, "name": next(w), "capability": "8.6"}]},
        "mamba_ssm": {"public_version": next(w), "installed_version": next(w), "label": next(w), "location": next(w),
                      "extensions": [{"module": next(w), "path": next(w), "abi": next(w),
                                      "archs": {"sass": [next(w)], "ptx": [], "hip": []},
                                      "import": {"ok": False, "error": next(w), "traceback": next(w)}}]},
        "cuda_toolkit": {"nvcc_on_path": next(w), "nvcc_release": next(w), "cuda_home": next(w)},
        "compiler": {"cxx": next(w), "version": next(w), "cxx20": False},
    }  # fmt: skip
    findings, extra = run_checks(facts, offline=True)
    text = report.render_text(facts, findings, extra)
    assert not raw_hidden(text), raw_hidden(text)
    doc = report.render_json(facts, findings, extra, 1)
    # kept, except that a lone surrogate (no UTF-8 can carry it) is written as the escape of what it stood for
    assert not raw_hidden(doc.replace("\n", "")) and json.loads(doc)["facts"]["compiler"] == report.utf8(facts["compiler"])
    assert not any("\ud800" <= c <= "\udfff" for c in json.dumps(json.loads(doc), ensure_ascii=False)), doc


@FAST
@given(pasted, st.one_of(st.none(), value))
def test_fuzz_explain(text, index):
    _explain_property(text, index)


@FAST
@given(value)
def test_fuzz_printed_command(index):
    _command_property(index)


@FAST
@given(st.lists(value, min_size=1, max_size=30))
def test_fuzz_report(words):
    _report_property(words)


@pytest.mark.slow
@LONG
@given(pasted, st.one_of(st.none(), value))
def test_fuzz_explain_long(text, index):
    _explain_property(text, index)


@pytest.mark.slow
@LONG
@given(value)
def test_fuzz_printed_command_long(index):
    _command_property(index)


@pytest.mark.slow
@LONG
@given(st.lists(value, min_size=1, max_size=30))
def test_fuzz_report_long(words):
    _report_property(words)
