"""builder.verifying.wheelmeta: the one METADATA reader, and its torch-pin rule, as the verifier and the index see it."""

from __future__ import annotations

import json
import re

import pytest
from wheelmaker import V, make_wheel

from builder.errors import VerificationError
from builder.publishing.index import build_index
from builder.publishing.resolve import resolve
from builder.verifying.wheels import read_facts
from mamba_ssm import variant as _variant

STABLE = f"{V}+cu13torchstable"


@pytest.mark.parametrize(
    ("requires", "pin"),
    [
        # a marked entry (an extra, a platform) does not apply to every install: it pins nothing, wherever it is
        (("torch>=2.10", 'torch<2.0; extra == "old"'), ">=2.10"),
        (('torch<2.0; extra == "old"', "torch>=2.10"), ">=2.10"),
        (('torch>=2.10; platform_machine == "aarch64"',), None),
        # every unmarked entry applies: pip takes them together
        (("torch>=2.10", "numpy", "torch<2.13"), "<2.13,>=2.10"),
        (("torch",), ""),
        (("torchvision>=0.20",), None),
    ],
)
def test_torch_pin_is_the_same_for_the_verifier_and_the_index(tmp_path, requires, pin):
    wheel = make_wheel(tmp_path / "wheels", "mamba-ssm", STABLE, "cp310-abi3-linux_x86_64", requires=requires)
    assert read_facts(wheel).requires_torch == pin
    build_index(tmp_path / "wheels", tmp_path / "index")
    entry = json.loads((tmp_path / "index" / "manifest.json").read_text())["files"][wheel.name]
    assert entry["requires_torch"] == (pin or "")  # the manifest keeps "" for "no pin"


def test_a_marked_torch_entry_does_not_narrow_what_a_stable_wheel_serves(tmp_path):
    """Every Requires-Dist entry counts, not the last one: a test extra's torch<2.0 must not make this wheel serve no torch."""
    make_wheel(
        tmp_path / "wheels",
        "mamba-ssm",
        STABLE,
        "cp310-abi3-linux_x86_64",
        requires=("torch>=2.10", 'torch<2.0; extra == "old"'),
    )
    build_index(tmp_path / "wheels", tmp_path / "index")
    manifest = json.loads((tmp_path / "index" / "manifest.json").read_text())
    res = resolve(manifest, _variant.from_values("2.12.0", cuda="13.0", python="cp312"))
    assert (res.key, res.entry.version if res.entry else None) == ("cu13-torchstable-abi3", STABLE)
    res = resolve(manifest, _variant.from_values("2.9.0", cuda="13.0", python="cp312"))
    assert res.entry is None and "needs torch>=2.10" in str(res.near)


def test_unreadable_dist_info_is_an_error_naming_the_wheel(tmp_path):
    bad = tmp_path / f"mamba_ssm-{V}+cu13torchstable-cp310-abi3-linux_x86_64.whl"
    bad.write_bytes(b"not a zip")
    with pytest.raises(VerificationError, match=re.escape(f"{bad.name}: not a readable zip file")):
        read_facts(bad)
