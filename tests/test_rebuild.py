"""A spec rebuilt because its inputs changed supersedes its published wheel; nothing else does.

Unit level: the real ledger, index and the build command's own helpers, wheels from wheelmaker
(no compile). The index side of --replace is in tests/test_index.py.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
from pathlib import Path

from farmkit import ci_spec
from wheelmaker import V, make_wheel

from builder.errors import IndexIntegrityError
from builder.run import build, schedule
from builder.verifying import evidence


def _sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def _publish_build(spec, wheels: Path, scratch: Path, payload: bytes) -> Path:
    """What _verify_and_publish leaves: the spec's wheel moved into dist/wheels with one rename."""
    torch = spec.label.split("torch")[1].split("cxx11abi")[0]
    fresh = make_wheel(
        scratch,
        "mamba-ssm",
        f"{V}+{spec.label}",
        f"{spec.python_tag}-{spec.python_tag}-linux_x86_64",
        requires=(f"torch=={torch}.*",),
        files={"mamba_ssm/__init__.py": payload},
    )
    dest = wheels / fresh.name
    os.replace(fresh, dest)
    tag = dest.name[:-4].split("-", 2)[2]  # its record, as _verify_and_publish leaves it
    evidence.write(
        evidence.path_of(dest), evidence.make(dest, built={"id": spec.id}, verified={"tags": [tag]}, smoke=None)
    )
    return dest


def _farm(tmp_path: Path):
    dist = tmp_path / "dist"
    wheels = dist / "wheels"
    wheels.mkdir(parents=True)
    spec = ci_spec("cpu")
    ledger = schedule.Ledger(dist / ".ledger.json")
    wheel = _publish_build(spec, wheels, tmp_path / "s1", b"first = 1\n")
    ledger.record(spec, wheel, 1.0)
    said: list[str] = []
    assert build._index(wheels, dist / "index", said.append) is None
    return dist, wheels, spec, ledger, wheel


def test_inputs_changed_rebuild_replaces_its_wheel_and_says_why(tmp_path):
    dist, wheels, spec, ledger, wheel = _farm(tmp_path)
    changed = dataclasses.replace(spec, inputs_hash="0123456789abcdef")  # e.g. sources edited
    assert ledger.done(changed, wheels) is None  # the farm rebuilds it
    previous = build.previous_entries(ledger, [changed])
    rebuilt = _publish_build(changed, wheels, tmp_path / "s2", b"second = 2\n")
    ledger.record(changed, rebuilt, 1.0)
    assert rebuilt.name == wheel.name  # same version and label: the same filename, other bytes

    replace = build.replacements([schedule.BuildOutcome(changed, "built", rebuilt)], previous)
    assert replace == {rebuilt.name: f"inputs changed (inputs_hash {spec.inputs_hash} -> 0123456789abcdef)"}
    said: list[str] = []
    assert build._index(wheels, dist / "index", said.append, replace) is None
    assert f"replaced {rebuilt.name}: inputs changed (inputs_hash {spec.inputs_hash} -> 0123456789abcdef)" in said
    assert _sha(dist / "index" / "files" / rebuilt.name) == _sha(rebuilt)


def test_a_rebuild_with_unchanged_inputs_is_still_refused(tmp_path):
    """The wheel vanished from dist and was rebuilt from the same inputs (bytes differ): no replacement
    is passed, so the published file stays and the index reports the conflict."""
    dist, wheels, spec, ledger, wheel = _farm(tmp_path)
    published = _sha(dist / "index" / "files" / wheel.name)
    wheel.unlink()
    assert ledger.done(spec, wheels) is None
    previous = build.previous_entries(ledger, [spec])
    rebuilt = _publish_build(spec, wheels, tmp_path / "s2", b"second = 2\n")
    outcomes = [schedule.BuildOutcome(spec, "built", rebuilt)]
    assert build.replacements(outcomes, previous) == {}
    err = build._index(wheels, dist / "index", lambda _: None, build.replacements(outcomes, previous))
    assert isinstance(err, IndexIntegrityError) and "differs from the published" in str(err)
    assert _sha(dist / "index" / "files" / wheel.name) == published


def test_only_built_outcomes_with_a_previous_wheel_of_that_name_count(tmp_path):
    spec = ci_spec("cpu")
    changed = dataclasses.replace(spec, inputs_hash="fedcba9876543210")
    name = f"mamba_ssm-{V}+x.whl"
    previous = {spec.id: {"inputs_hash": spec.inputs_hash, "wheel": name}}
    wheel = tmp_path / name
    assert build.replacements([schedule.BuildOutcome(changed, "failed", None)], previous) == {}
    assert build.replacements([schedule.BuildOutcome(changed, "skipped", wheel)], previous) == {}
    assert build.replacements([schedule.BuildOutcome(changed, "built", tmp_path / "other.whl")], previous) == {}
    assert build.replacements([schedule.BuildOutcome(changed, "built", wheel)], {}) == {}  # first build ever
    assert list(build.replacements([schedule.BuildOutcome(changed, "built", wheel)], previous)) == [name]
