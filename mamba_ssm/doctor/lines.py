"""The product lines the doctor's fixes name: where each line's index is on the site, and the newest
version of each project the release builds (pinned when the installed version is unknown).

Generated from the release plan (matrix.toml, recipes/*.toml) by `python -m builder doctor-dist
--write-lines`; tests/test_printed_commands.py fails when it differs. Do not edit by hand.
"""

LINES = {
    "checkout": {"folder": "", "projects": {"mamba-ssm": "2.3.0"}},
    "upstream": {"folder": "upstream/", "projects": {"causal-conv1d": "1.7.0", "mamba-ssm": "2.3.2.post1"}},
}
