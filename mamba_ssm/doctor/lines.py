"""The product lines the doctor's fixes name: where each line's index is on the site, the newest version
of each project the release builds (pinned when the installed version is unknown), and per label what its
wheels serve (Python tags, machines, glibc floor, GPU code).

Generated from the release plan (matrix.toml, recipes/*.toml) by `python -m builder doctor-dist
--write-lines`; tests/test_printed_commands.py fails when it differs. Do not edit by hand.
"""

LINES = {
    "checkout": {
        "folder": "",
        "projects": {"mamba-ssm": "2.3.0"},
        "labels": {
            "cputorch2.4cxx11abiFALSE": {"pythons": ["cp310", "cp311", "cp312"], "machines": ["aarch64", "x86_64"], "glibc": ["2.28"], "archs": [], "glibc_by_machine": {"aarch64": "2.28", "x86_64": "2.28"}},
            "cputorch2.5cxx11abiFALSE": {"pythons": ["cp310", "cp311", "cp312", "cp313"], "machines": ["aarch64", "x86_64"], "glibc": ["2.28"], "archs": [], "glibc_by_machine": {"aarch64": "2.28", "x86_64": "2.28"}},
            "cputorch2.6cxx11abiFALSE": {"pythons": ["cp310", "cp311", "cp312", "cp313"], "machines": ["aarch64", "x86_64"], "glibc": ["2.28"], "archs": [], "glibc_by_machine": {"aarch64": "2.28", "x86_64": "2.28"}},
            "cputorch2.7cxx11abiTRUE": {"pythons": ["cp310", "cp311", "cp312", "cp313"], "machines": ["aarch64", "x86_64"], "glibc": ["2.28"], "archs": [], "glibc_by_machine": {"aarch64": "2.28", "x86_64": "2.28"}},
            "cputorch2.8cxx11abiTRUE": {"pythons": ["cp310", "cp311", "cp312", "cp313"], "machines": ["aarch64", "x86_64"], "glibc": ["2.28"], "archs": [], "glibc_by_machine": {"aarch64": "2.28", "x86_64": "2.28"}},
            "cputorch2.9cxx11abiTRUE": {"pythons": ["cp310", "cp311", "cp312", "cp313", "cp314"], "machines": ["aarch64", "x86_64"], "glibc": ["2.28"], "archs": [], "glibc_by_machine": {"aarch64": "2.28", "x86_64": "2.28"}},
            "cputorchstable": {"pythons": ["cp310-abi3"], "machines": ["aarch64", "x86_64"], "glibc": ["2.28"], "archs": [], "glibc_by_machine": {"aarch64": "2.28", "x86_64": "2.28"}},
            "cu11torch2.4cxx11abiFALSE": {"pythons": ["cp310", "cp311", "cp312"], "machines": ["x86_64"], "glibc": ["2.28"], "archs": ["sm_75", "sm_80", "sm_87", "sm_90"], "glibc_by_machine": {"x86_64": "2.28"}},
            "cu11torch2.5cxx11abiFALSE": {"pythons": ["cp310", "cp311", "cp312", "cp313"], "machines": ["x86_64"], "glibc": ["2.28"], "archs": ["sm_75", "sm_80", "sm_87", "sm_90"], "glibc_by_machine": {"x86_64": "2.28"}},
            "cu11torch2.6cxx11abiFALSE": {"pythons": ["cp310", "cp311", "cp312", "cp313"], "machines": ["x86_64"], "glibc": ["2.28"], "archs": ["sm_75", "sm_80", "sm_87", "sm_90"], "glibc_by_machine": {"x86_64": "2.28"}},
            "cu11torch2.6cxx11abiTRUE": {"pythons": ["cp310", "cp311", "cp312", "cp313"], "machines": ["x86_64"], "glibc": ["2.28"], "archs": ["sm_75", "sm_80", "sm_87", "sm_90"], "glibc_by_machine": {"x86_64": "2.28"}},
            "cu11torch2.7cxx11abiTRUE": {"pythons": ["cp310", "cp311", "cp312", "cp313"], "machines": ["x86_64"], "glibc": ["2.28"], "archs": ["sm_75", "sm_80", "sm_87", "sm_90"], "glibc_by_machine": {"x86_64": "2.28"}},
            "cu12torch2.4cxx11abiFALSE": {"pythons": ["cp310", "cp311", "cp312"], "machines": ["x86_64"], "glibc": ["2.28"], "archs": ["sm_75", "sm_80", "sm_87", "sm_90", "sm_100", "sm_120"], "glibc_by_machine": {"x86_64": "2.28"}},
            "cu12torch2.4cxx11abiTRUE": {"pythons": ["cp310", "cp311", "cp312"], "machines": ["x86_64"], "glibc": ["2.28"], "archs": ["sm_75", "sm_80", "sm_87", "sm_90", "sm_100", "sm_120"], "glibc_by_machine": {"x86_64": "2.28"}},
            "cu12torch2.5cxx11abiFALSE": {"pythons": ["cp310", "cp311", "cp312", "cp313"], "machines": ["x86_64"], "glibc": ["2.28"], "archs": ["sm_75", "sm_80", "sm_87", "sm_90", "sm_100", "sm_120"], "glibc_by_machine": {"x86_64": "2.28"}},
            "cu12torch2.5cxx11abiTRUE": {"pythons": ["cp310", "cp311", "cp312", "cp313"], "machines": ["x86_64"], "glibc": ["2.28"], "archs": ["sm_75", "sm_80", "sm_87", "sm_90", "sm_100", "sm_120"], "glibc_by_machine": {"x86_64": "2.28"}},
            "cu12torch2.6cxx11abiFALSE": {"pythons": ["cp310", "cp311", "cp312", "cp313"], "machines": ["aarch64", "x86_64"], "glibc": ["2.28"], "archs": ["sm_75", "sm_80", "sm_87", "sm_90", "sm_100", "sm_120"], "glibc_by_machine": {"aarch64": "2.28", "x86_64": "2.28"}},
            "cu12torch2.6cxx11abiTRUE": {"pythons": ["cp310", "cp311", "cp312", "cp313"], "machines": ["x86_64"], "glibc": ["2.28"], "archs": ["sm_75", "sm_80", "sm_87", "sm_90", "sm_100", "sm_120"], "glibc_by_machine": {"x86_64": "2.28"}},
            "cu12torch2.7cxx11abiTRUE": {"pythons": ["cp310", "cp311", "cp312", "cp313"], "machines": ["aarch64", "x86_64"], "glibc": ["2.28"], "archs": ["sm_75", "sm_80", "sm_87", "sm_90", "sm_100", "sm_120"], "glibc_by_machine": {"aarch64": "2.28", "x86_64": "2.28"}},
            "cu12torch2.8cxx11abiTRUE": {"pythons": ["cp310", "cp311", "cp312", "cp313"], "machines": ["aarch64", "x86_64"], "glibc": ["2.28"], "archs": ["sm_75", "sm_80", "sm_87", "sm_90", "sm_100", "sm_120"], "glibc_by_machine": {"aarch64": "2.28", "x86_64": "2.28"}},
            "cu12torch2.9cxx11abiTRUE": {"pythons": ["cp310", "cp311", "cp312", "cp313", "cp314"], "machines": ["aarch64", "x86_64"], "glibc": ["2.28"], "archs": ["sm_75", "sm_80", "sm_87", "sm_90", "sm_100", "sm_120"], "glibc_by_machine": {"aarch64": "2.28", "x86_64": "2.28"}},
            "cu12torchstable": {"pythons": ["cp310-abi3"], "machines": ["aarch64", "x86_64"], "glibc": ["2.28"], "archs": ["sm_75", "sm_80", "sm_87", "sm_90", "sm_100", "sm_120"], "glibc_by_machine": {"aarch64": "2.28", "x86_64": "2.28"}},
            "cu13torch2.9cxx11abiTRUE": {"pythons": ["cp310", "cp311", "cp312", "cp313", "cp314"], "machines": ["aarch64", "x86_64"], "glibc": ["2.28"], "archs": ["sm_75", "sm_80", "sm_87", "sm_90", "sm_100", "sm_103", "sm_110", "sm_120", "sm_121"], "glibc_by_machine": {"aarch64": "2.28", "x86_64": "2.28"}},
            "cu13torchstable": {"pythons": ["cp310-abi3"], "machines": ["aarch64", "x86_64"], "glibc": ["2.28"], "archs": ["sm_75", "sm_80", "sm_87", "sm_90", "sm_100", "sm_103", "sm_110", "sm_120", "sm_121"], "glibc_by_machine": {"aarch64": "2.28", "x86_64": "2.28"}},
            "hip62torch2.5cxx11abiFALSE": {"pythons": ["cp310", "cp311", "cp312", "cp313"], "machines": ["x86_64"], "glibc": ["2.35"], "archs": ["gfx90a", "gfx942", "gfx1100"], "glibc_by_machine": {"x86_64": "2.35"}},
            "hip62torch2.6cxx11abiFALSE": {"pythons": ["cp310", "cp311", "cp312", "cp313"], "machines": ["x86_64"], "glibc": ["2.35"], "archs": ["gfx90a", "gfx942", "gfx1100"], "glibc_by_machine": {"x86_64": "2.35"}},
            "hip62torch2.7cxx11abiTRUE": {"pythons": ["cp310", "cp311", "cp312", "cp313"], "machines": ["x86_64"], "glibc": ["2.35"], "archs": ["gfx90a", "gfx942", "gfx1100"], "glibc_by_machine": {"x86_64": "2.35"}},
            "hip64torch2.8cxx11abiTRUE": {"pythons": ["cp310", "cp311", "cp312", "cp313"], "machines": ["x86_64"], "glibc": ["2.35"], "archs": ["gfx90a", "gfx942", "gfx1100"], "glibc_by_machine": {"x86_64": "2.35"}},
            "hip64torch2.9cxx11abiTRUE": {"pythons": ["cp310", "cp311", "cp312", "cp313", "cp314"], "machines": ["x86_64"], "glibc": ["2.35"], "archs": ["gfx90a", "gfx942", "gfx1100"], "glibc_by_machine": {"x86_64": "2.35"}},
            "hip72torch2.11cxx11abiTRUE": {"pythons": ["cp310", "cp311", "cp312", "cp313", "cp314"], "machines": ["x86_64"], "glibc": ["2.35"], "archs": ["gfx90a", "gfx942", "gfx950", "gfx1100", "gfx1200", "gfx1201"], "glibc_by_machine": {"x86_64": "2.35"}},
            "hip72torch2.12cxx11abiTRUE": {"pythons": ["cp310", "cp311", "cp312", "cp313", "cp314"], "machines": ["x86_64"], "glibc": ["2.35"], "archs": ["gfx90a", "gfx942", "gfx950", "gfx1100", "gfx1200", "gfx1201"], "glibc_by_machine": {"x86_64": "2.35"}},
            "hip72torch2.13cxx11abiTRUE": {"pythons": ["cp310", "cp311", "cp312", "cp313", "cp314"], "machines": ["x86_64"], "glibc": ["2.35"], "archs": ["gfx90a", "gfx942", "gfx950", "gfx1100", "gfx1200", "gfx1201"], "glibc_by_machine": {"x86_64": "2.35"}},
            "hip72torch2.14cxx11abiTRUE": {"pythons": ["cp310", "cp311", "cp312", "cp313", "cp314"], "machines": ["x86_64"], "glibc": ["2.35"], "archs": ["gfx90a", "gfx942", "gfx950", "gfx1100", "gfx1200", "gfx1201"], "glibc_by_machine": {"x86_64": "2.35"}},
        },
    },
    "upstream": {
        "folder": "upstream/",
        "projects": {"causal-conv1d": "1.7.0", "mamba-ssm": "2.3.2.post1"},
        "labels": {
            "cu11torch1.13cxx11abiFALSE": {"pythons": ["cp310", "cp311"], "machines": ["x86_64"], "glibc": ["2.28"], "archs": ["sm_75", "sm_80", "sm_87", "sm_90"], "glibc_by_machine": {"x86_64": "2.28"}},
            "cu11torch2.0cxx11abiFALSE": {"pythons": ["cp310", "cp311"], "machines": ["x86_64"], "glibc": ["2.28"], "archs": ["sm_75", "sm_80", "sm_87", "sm_90"], "glibc_by_machine": {"x86_64": "2.28"}},
            "cu11torch2.1cxx11abiFALSE": {"pythons": ["cp310", "cp311"], "machines": ["x86_64"], "glibc": ["2.28"], "archs": ["sm_75", "sm_80", "sm_87", "sm_90"], "glibc_by_machine": {"x86_64": "2.28"}},
            "cu11torch2.2cxx11abiFALSE": {"pythons": ["cp310", "cp311", "cp312"], "machines": ["x86_64"], "glibc": ["2.28"], "archs": ["sm_75", "sm_80", "sm_87", "sm_90"], "glibc_by_machine": {"x86_64": "2.28"}},
            "cu11torch2.3cxx11abiFALSE": {"pythons": ["cp310", "cp311", "cp312"], "machines": ["x86_64"], "glibc": ["2.28"], "archs": ["sm_75", "sm_80", "sm_87", "sm_90"], "glibc_by_machine": {"x86_64": "2.28"}},
            "cu11torch2.4cxx11abiFALSE": {"pythons": ["cp310", "cp311", "cp312"], "machines": ["x86_64"], "glibc": ["2.28"], "archs": ["sm_75", "sm_80", "sm_87", "sm_90"], "glibc_by_machine": {"x86_64": "2.28"}},
            "cu11torch2.5cxx11abiFALSE": {"pythons": ["cp310", "cp311", "cp312", "cp313"], "machines": ["x86_64"], "glibc": ["2.28"], "archs": ["sm_75", "sm_80", "sm_87", "sm_90"], "glibc_by_machine": {"x86_64": "2.28"}},
            "cu11torch2.6cxx11abiFALSE": {"pythons": ["cp310", "cp311", "cp312", "cp313"], "machines": ["x86_64"], "glibc": ["2.28"], "archs": ["sm_75", "sm_80", "sm_87", "sm_90"], "glibc_by_machine": {"x86_64": "2.28"}},
            "cu11torch2.6cxx11abiTRUE": {"pythons": ["cp310", "cp311", "cp312", "cp313"], "machines": ["x86_64"], "glibc": ["2.28"], "archs": ["sm_75", "sm_80", "sm_87", "sm_90"], "glibc_by_machine": {"x86_64": "2.28"}},
            "cu11torch2.7cxx11abiTRUE": {"pythons": ["cp310", "cp311", "cp312", "cp313"], "machines": ["x86_64"], "glibc": ["2.28"], "archs": ["sm_75", "sm_80", "sm_87", "sm_90"], "glibc_by_machine": {"x86_64": "2.28"}},
            "cu12torch2.10cxx11abiTRUE": {"pythons": ["cp310", "cp311", "cp312", "cp313", "cp314"], "machines": ["aarch64", "x86_64"], "glibc": ["2.28", "2.34"], "archs": ["sm_75", "sm_80", "sm_87", "sm_90", "sm_100", "sm_120"], "glibc_by_machine": {"aarch64": "2.34", "x86_64": "2.28"}},
            "cu12torch2.11cxx11abiTRUE": {"pythons": ["cp310", "cp311", "cp312", "cp313", "cp314"], "machines": ["aarch64", "x86_64"], "glibc": ["2.28", "2.34"], "archs": ["sm_75", "sm_80", "sm_87", "sm_90", "sm_100", "sm_120"], "glibc_by_machine": {"aarch64": "2.34", "x86_64": "2.28"}},
            "cu12torch2.12cxx11abiTRUE": {"pythons": ["cp310", "cp311", "cp312", "cp313", "cp314"], "machines": ["x86_64"], "glibc": ["2.28"], "archs": ["sm_75", "sm_80", "sm_87", "sm_90", "sm_100", "sm_120"], "glibc_by_machine": {"x86_64": "2.28"}},
            "cu12torch2.13cxx11abiTRUE": {"pythons": ["cp310", "cp311", "cp312", "cp313", "cp314"], "machines": ["x86_64"], "glibc": ["2.28"], "archs": ["sm_75", "sm_80", "sm_87", "sm_90", "sm_100", "sm_120"], "glibc_by_machine": {"x86_64": "2.28"}},
            "cu12torch2.14cxx11abiTRUE": {"pythons": ["cp310", "cp311", "cp312", "cp313", "cp314"], "machines": ["x86_64"], "glibc": ["2.28"], "archs": ["sm_75", "sm_80", "sm_87", "sm_90", "sm_100", "sm_120"], "glibc_by_machine": {"x86_64": "2.28"}},
            "cu12torch2.1cxx11abiFALSE": {"pythons": ["cp310", "cp311"], "machines": ["x86_64"], "glibc": ["2.28"], "archs": ["sm_75", "sm_80", "sm_87", "sm_90", "sm_100", "sm_120"], "glibc_by_machine": {"x86_64": "2.28"}},
            "cu12torch2.2cxx11abiFALSE": {"pythons": ["cp310", "cp311", "cp312"], "machines": ["x86_64"], "glibc": ["2.28"], "archs": ["sm_75", "sm_80", "sm_87", "sm_90", "sm_100", "sm_120"], "glibc_by_machine": {"x86_64": "2.28"}},
            "cu12torch2.3cxx11abiFALSE": {"pythons": ["cp310", "cp311", "cp312"], "machines": ["x86_64"], "glibc": ["2.28"], "archs": ["sm_75", "sm_80", "sm_87", "sm_90", "sm_100", "sm_120"], "glibc_by_machine": {"x86_64": "2.28"}},
            "cu12torch2.4cxx11abiFALSE": {"pythons": ["cp310", "cp311", "cp312"], "machines": ["x86_64"], "glibc": ["2.28"], "archs": ["sm_75", "sm_80", "sm_87", "sm_90", "sm_100", "sm_120"], "glibc_by_machine": {"x86_64": "2.28"}},
            "cu12torch2.4cxx11abiTRUE": {"pythons": ["cp310", "cp311", "cp312"], "machines": ["x86_64"], "glibc": ["2.28"], "archs": ["sm_75", "sm_80", "sm_87", "sm_90", "sm_100", "sm_120"], "glibc_by_machine": {"x86_64": "2.28"}},
            "cu12torch2.5cxx11abiFALSE": {"pythons": ["cp310", "cp311", "cp312", "cp313"], "machines": ["x86_64"], "glibc": ["2.28"], "archs": ["sm_75", "sm_80", "sm_87", "sm_90", "sm_100", "sm_120"], "glibc_by_machine": {"x86_64": "2.28"}},
            "cu12torch2.5cxx11abiTRUE": {"pythons": ["cp310", "cp311", "cp312", "cp313"], "machines": ["x86_64"], "glibc": ["2.28"], "archs": ["sm_75", "sm_80", "sm_87", "sm_90", "sm_100", "sm_120"], "glibc_by_machine": {"x86_64": "2.28"}},
            "cu12torch2.6cxx11abiFALSE": {"pythons": ["cp310", "cp311", "cp312", "cp313"], "machines": ["aarch64", "x86_64"], "glibc": ["2.28", "2.34"], "archs": ["sm_75", "sm_80", "sm_87", "sm_90", "sm_100", "sm_120"], "glibc_by_machine": {"aarch64": "2.34", "x86_64": "2.28"}},
            "cu12torch2.6cxx11abiTRUE": {"pythons": ["cp310", "cp311", "cp312", "cp313"], "machines": ["x86_64"], "glibc": ["2.28"], "archs": ["sm_75", "sm_80", "sm_87", "sm_90", "sm_100", "sm_120"], "glibc_by_machine": {"x86_64": "2.28"}},
            "cu12torch2.7cxx11abiTRUE": {"pythons": ["cp310", "cp311", "cp312", "cp313"], "machines": ["aarch64", "x86_64"], "glibc": ["2.28", "2.34"], "archs": ["sm_75", "sm_80", "sm_87", "sm_90", "sm_100", "sm_120"], "glibc_by_machine": {"aarch64": "2.34", "x86_64": "2.28"}},
            "cu12torch2.8cxx11abiTRUE": {"pythons": ["cp310", "cp311", "cp312", "cp313"], "machines": ["aarch64", "x86_64"], "glibc": ["2.28", "2.34"], "archs": ["sm_75", "sm_80", "sm_87", "sm_90", "sm_100", "sm_120"], "glibc_by_machine": {"aarch64": "2.34", "x86_64": "2.28"}},
            "cu12torch2.9cxx11abiTRUE": {"pythons": ["cp310", "cp311", "cp312", "cp313", "cp314"], "machines": ["aarch64", "x86_64"], "glibc": ["2.28", "2.34"], "archs": ["sm_75", "sm_80", "sm_87", "sm_90", "sm_100", "sm_120"], "glibc_by_machine": {"aarch64": "2.34", "x86_64": "2.28"}},
            "cu13torch2.10cxx11abiTRUE": {"pythons": ["cp310", "cp311", "cp312", "cp313", "cp314"], "machines": ["aarch64", "x86_64"], "glibc": ["2.28", "2.34"], "archs": ["compute_100", "sm_75", "sm_80", "sm_87", "sm_90", "sm_100", "sm_103", "sm_110", "sm_120", "sm_121"], "glibc_by_machine": {"aarch64": "2.34", "x86_64": "2.28"}},
            "cu13torch2.11cxx11abiTRUE": {"pythons": ["cp310", "cp311", "cp312", "cp313", "cp314"], "machines": ["aarch64", "x86_64"], "glibc": ["2.28", "2.34"], "archs": ["compute_100", "sm_75", "sm_80", "sm_87", "sm_90", "sm_100", "sm_103", "sm_110", "sm_120", "sm_121"], "glibc_by_machine": {"aarch64": "2.34", "x86_64": "2.28"}},
            "cu13torch2.12cxx11abiTRUE": {"pythons": ["cp310", "cp311", "cp312", "cp313", "cp314"], "machines": ["aarch64", "x86_64"], "glibc": ["2.28", "2.34"], "archs": ["compute_100", "sm_75", "sm_80", "sm_87", "sm_90", "sm_100", "sm_103", "sm_110", "sm_120", "sm_121"], "glibc_by_machine": {"aarch64": "2.34", "x86_64": "2.28"}},
            "cu13torch2.13cxx11abiTRUE": {"pythons": ["cp310", "cp311", "cp312", "cp313", "cp314"], "machines": ["aarch64", "x86_64"], "glibc": ["2.28", "2.34"], "archs": ["compute_100", "sm_75", "sm_80", "sm_87", "sm_90", "sm_100", "sm_103", "sm_110", "sm_120", "sm_121"], "glibc_by_machine": {"aarch64": "2.34", "x86_64": "2.28"}},
            "cu13torch2.14cxx11abiTRUE": {"pythons": ["cp310", "cp311", "cp312", "cp313", "cp314"], "machines": ["aarch64", "x86_64"], "glibc": ["2.28", "2.34"], "archs": ["compute_100", "sm_75", "sm_80", "sm_87", "sm_90", "sm_100", "sm_103", "sm_110", "sm_120", "sm_121"], "glibc_by_machine": {"aarch64": "2.34", "x86_64": "2.28"}},
            "cu13torch2.15cxx11abiTRUE": {"pythons": ["cp311", "cp312", "cp313", "cp314", "cp315"], "machines": ["aarch64", "x86_64"], "glibc": ["2.28", "2.34"], "archs": ["compute_100", "sm_75", "sm_80", "sm_87", "sm_90", "sm_100", "sm_103", "sm_110", "sm_120", "sm_121"], "glibc_by_machine": {"aarch64": "2.34", "x86_64": "2.28"}},
            "cu13torch2.9cxx11abiTRUE": {"pythons": ["cp310", "cp311", "cp312", "cp313", "cp314"], "machines": ["aarch64", "x86_64"], "glibc": ["2.28", "2.34"], "archs": ["compute_100", "sm_75", "sm_80", "sm_87", "sm_90", "sm_100", "sm_103", "sm_110", "sm_120", "sm_121"], "glibc_by_machine": {"aarch64": "2.34", "x86_64": "2.28"}},
            "hip62torch2.5cxx11abiFALSE": {"pythons": ["cp310", "cp311", "cp312", "cp313"], "machines": ["x86_64"], "glibc": ["2.35"], "archs": ["gfx90a", "gfx942", "gfx1100"], "glibc_by_machine": {"x86_64": "2.35"}},
            "hip62torch2.6cxx11abiFALSE": {"pythons": ["cp310", "cp311", "cp312", "cp313"], "machines": ["x86_64"], "glibc": ["2.35"], "archs": ["gfx90a", "gfx942", "gfx1100"], "glibc_by_machine": {"x86_64": "2.35"}},
            "hip62torch2.7cxx11abiTRUE": {"pythons": ["cp310", "cp311", "cp312", "cp313"], "machines": ["x86_64"], "glibc": ["2.35"], "archs": ["gfx90a", "gfx942", "gfx1100"], "glibc_by_machine": {"x86_64": "2.35"}},
            "hip64torch2.8cxx11abiTRUE": {"pythons": ["cp310", "cp311", "cp312", "cp313"], "machines": ["x86_64"], "glibc": ["2.35"], "archs": ["gfx90a", "gfx942", "gfx1100"], "glibc_by_machine": {"x86_64": "2.35"}},
            "hip64torch2.9cxx11abiTRUE": {"pythons": ["cp310", "cp311", "cp312", "cp313", "cp314"], "machines": ["x86_64"], "glibc": ["2.35"], "archs": ["gfx90a", "gfx942", "gfx1100"], "glibc_by_machine": {"x86_64": "2.35"}},
            "hip72torch2.11cxx11abiTRUE": {"pythons": ["cp310", "cp311", "cp312", "cp313", "cp314"], "machines": ["x86_64"], "glibc": ["2.35"], "archs": ["gfx90a", "gfx942", "gfx950", "gfx1100", "gfx1200", "gfx1201"], "glibc_by_machine": {"x86_64": "2.35"}},
            "hip72torch2.12cxx11abiTRUE": {"pythons": ["cp310", "cp311", "cp312", "cp313", "cp314"], "machines": ["x86_64"], "glibc": ["2.35"], "archs": ["gfx90a", "gfx942", "gfx950", "gfx1100", "gfx1200", "gfx1201"], "glibc_by_machine": {"x86_64": "2.35"}},
            "hip72torch2.13cxx11abiTRUE": {"pythons": ["cp310", "cp311", "cp312", "cp313", "cp314"], "machines": ["x86_64"], "glibc": ["2.35"], "archs": ["gfx90a", "gfx942", "gfx950", "gfx1100", "gfx1200", "gfx1201"], "glibc_by_machine": {"x86_64": "2.35"}},
            "hip72torch2.14cxx11abiTRUE": {"pythons": ["cp310", "cp311", "cp312", "cp313", "cp314"], "machines": ["x86_64"], "glibc": ["2.35"], "archs": ["gfx90a", "gfx942", "gfx950", "gfx1100", "gfx1200", "gfx1201"], "glibc_by_machine": {"x86_64": "2.35"}},
        },
    },
}

# What people call the GPUs of each architecture (builder/data/toolkits.toml [gpus]).
GPUS = {"sm_70": "V100", "sm_75": "T4, RTX 20", "sm_80": "A100, A30", "sm_86": "A10, A40, RTX 30", "sm_87": "Jetson Orin", "sm_89": "L4, L40, RTX 40", "sm_90": "H100, H200, GH200", "sm_100": "B200, GB200", "sm_103": "B300, GB300", "sm_110": "Jetson Thor", "sm_120": "RTX 50, RTX PRO 6000 Blackwell", "sm_121": "DGX Spark (GB10)", "gfx90a": "MI200 (MI210, MI250)", "gfx942": "MI300 (MI300X, MI300A, MI325X)", "gfx950": "MI350", "gfx1100": "RDNA3 (RX 7900)", "gfx1200": "RDNA4", "gfx1201": "RDNA4"}

# Where no wheel of either line is built, and what to do instead (builder/data/support.toml).
UNSUPPORTED = {
    "Windows": "use WSL2 (a Linux distribution under Windows) and the Linux wheels; CUDA works there with NVIDIA's WSL driver",
    "macOS": "no: the build is Linux and GCC only (`-fopenmp`, GCC pragmas, torch's `libc10.so`), and there is no macOS wheel; use a Linux machine or container",
    "other Linux machines (ppc64le, s390x, riscv64), musl (Alpine)": "no wheel; a source build on glibc Linux with GCC may work, untried",
    "free-threaded CPython (3.14t, 3.15t)": "no wheel of either line: the farm's interpreters are CPython's default (GIL) builds, and the stable-ABI (`abi3`) wheels that serve torch 2.10 and newer cannot load in a free-threaded interpreter. torch does ship cp314t and cp315t wheels; use the same Python's default build (`python3.14`, tag cp314) in a new virtual environment. `mamba-doctor` names a free-threaded interpreter (cp314t) and says this",
}

# Cells of the release's projects that are not built because their requirements do not install beside
# their torch (builder/data/installs.json): the resolver's reason, and what to do instead.
LEFT_OUT = [
 {
  "project": "mamba-ssm",
  "version": "2.3.2.post1",
  "torch": "2.15",
  "python": "cp315",
  "machine": "aarch64",
  "why": "uv: error: No solution found when resolving dependencies cause: Because nvidia-cutlass-dsl-libs-base==4.5.0.dev0 has no wheels with a matching Python ABI tag (e.g., `cp315`) and nvidia-cutlass-dsl==4.5.0.dev0 depends on nvidia-cutlass-dsl-libs-base==4.5.0.dev0, we can conclude that nvidia-cutlass-dsl==4.5.0.dev0 cannot be used. (1) Because nvidia-cutlass-dsl-libs-base==4.8.1 has no wheels with a matching Python ABI tag (e.g., `cp315`) and nvidia-cutlass-dsl>=4.8.1 depends on nvidia-cutlass-dsl-libs-base==4.8.1, we can conclude that nvidia-cutlass-dsl>=4.8.1 cannot be used. (2) And because we know ... (146 more characters)",
  "instead": "Python 3.11, 3.12, 3.13, 3.14 with this torch"
 },
 {
  "project": "mamba-ssm",
  "version": "2.3.2.post1",
  "torch": "2.15",
  "python": "cp315",
  "machine": "x86_64",
  "why": "uv: error: No solution found when resolving dependencies cause: Because nvidia-cutlass-dsl-libs-base==4.5.0.dev0 has no wheels with a matching Python ABI tag (e.g., `cp315`) and nvidia-cutlass-dsl==4.5.0.dev0 depends on nvidia-cutlass-dsl-libs-base==4.5.0.dev0, we can conclude that nvidia-cutlass-dsl==4.5.0.dev0 cannot be used. (1) Because nvidia-cutlass-dsl-libs-base==4.8.1 has no wheels with a matching Python ABI tag (e.g., `cp315`) and nvidia-cutlass-dsl>=4.8.1 depends on nvidia-cutlass-dsl-libs-base==4.8.1, we can conclude that nvidia-cutlass-dsl>=4.8.1 cannot be used. (2) And because we know ... (146 more characters)",
  "instead": "Python 3.11, 3.12, 3.13, 3.14 with this torch"
 },
 {
  "project": "mamba-ssm",
  "version": "2.3.2.post1",
  "torch": "2.4",
  "python": "cp310",
  "machine": "x86_64",
  "why": "uv: error: No solution found when resolving dependencies cause: Because torch==2.4.1 depends on triton{python_full_version < '3.13' and platform_machine == 'x86_64' and sys_platform == 'linux'}==3.0.0 and you require triton>=3.5.0, we can conclude that your requirements and torch==2.4.1 are incompatible. And because you require torch==2.4.1, we can conclude that your requirements are unsatisfiable.",
  "instead": "mamba-ssm==2.3.1 (the newest release that installs beside this torch)"
 },
 {
  "project": "mamba-ssm",
  "version": "2.3.2.post1",
  "torch": "2.4",
  "python": "cp311",
  "machine": "x86_64",
  "why": "uv: error: No solution found when resolving dependencies cause: Because torch==2.4.1 depends on triton{python_full_version < '3.13' and platform_machine == 'x86_64' and sys_platform == 'linux'}==3.0.0 and you require triton>=3.5.0, we can conclude that your requirements and torch==2.4.1 are incompatible. And because you require torch==2.4.1, we can conclude that your requirements are unsatisfiable.",
  "instead": "mamba-ssm==2.3.1 (the newest release that installs beside this torch)"
 },
 {
  "project": "mamba-ssm",
  "version": "2.3.2.post1",
  "torch": "2.4",
  "python": "cp312",
  "machine": "x86_64",
  "why": "uv: error: No solution found when resolving dependencies cause: Because torch==2.4.1 depends on triton{python_full_version < '3.13' and platform_machine == 'x86_64' and sys_platform == 'linux'}==3.0.0 and you require triton>=3.5.0, we can conclude that your requirements and torch==2.4.1 are incompatible. And because you require torch==2.4.1, we can conclude that your requirements are unsatisfiable.",
  "instead": "mamba-ssm==2.3.1 (the newest release that installs beside this torch)"
 },
 {
  "project": "mamba-ssm",
  "version": "2.3.2.post1",
  "torch": "2.5",
  "python": "cp310",
  "machine": "x86_64",
  "why": "uv: error: No solution found when resolving dependencies cause: Because torch==2.5.1 depends on triton{python_full_version < '3.13' and platform_machine == 'x86_64' and sys_platform == 'linux'}==3.1.0 and you require triton>=3.5.0, we can conclude that your requirements and torch==2.5.1 are incompatible. And because you require torch==2.5.1, we can conclude that your requirements are unsatisfiable.",
  "instead": "mamba-ssm==2.3.1 (the newest release that installs beside this torch)"
 },
 {
  "project": "mamba-ssm",
  "version": "2.3.2.post1",
  "torch": "2.5",
  "python": "cp311",
  "machine": "x86_64",
  "why": "uv: error: No solution found when resolving dependencies cause: Because torch==2.5.1 depends on triton{python_full_version < '3.13' and platform_machine == 'x86_64' and sys_platform == 'linux'}==3.1.0 and you require triton>=3.5.0, we can conclude that your requirements and torch==2.5.1 are incompatible. And because you require torch==2.5.1, we can conclude that your requirements are unsatisfiable.",
  "instead": "mamba-ssm==2.3.1 (the newest release that installs beside this torch)"
 },
 {
  "project": "mamba-ssm",
  "version": "2.3.2.post1",
  "torch": "2.5",
  "python": "cp312",
  "machine": "x86_64",
  "why": "uv: error: No solution found when resolving dependencies cause: Because torch==2.5.1 depends on triton{python_full_version < '3.13' and platform_machine == 'x86_64' and sys_platform == 'linux'}==3.1.0 and you require triton>=3.5.0, we can conclude that your requirements and torch==2.5.1 are incompatible. And because you require torch==2.5.1, we can conclude that your requirements are unsatisfiable.",
  "instead": "mamba-ssm==2.3.1 (the newest release that installs beside this torch)"
 },
 {
  "project": "mamba-ssm",
  "version": "2.3.2.post1",
  "torch": "2.6",
  "python": "cp310",
  "machine": "x86_64",
  "why": "uv: error: No solution found when resolving dependencies cause: Because torch==2.6.0 depends on triton{platform_machine == 'x86_64' and sys_platform == 'linux'}==3.2.0 and you require triton>=3.5.0, we can conclude that your requirements and torch==2.6.0 are incompatible. And because you require torch==2.6.0, we can conclude that your requirements are unsatisfiable.",
  "instead": "mamba-ssm==2.3.1 (the newest release that installs beside this torch)"
 },
 {
  "project": "mamba-ssm",
  "version": "2.3.2.post1",
  "torch": "2.6",
  "python": "cp311",
  "machine": "x86_64",
  "why": "uv: error: No solution found when resolving dependencies cause: Because torch==2.6.0 depends on triton{platform_machine == 'x86_64' and sys_platform == 'linux'}==3.2.0 and you require triton>=3.5.0, we can conclude that your requirements and torch==2.6.0 are incompatible. And because you require torch==2.6.0, we can conclude that your requirements are unsatisfiable.",
  "instead": "mamba-ssm==2.3.1 (the newest release that installs beside this torch)"
 },
 {
  "project": "mamba-ssm",
  "version": "2.3.2.post1",
  "torch": "2.6",
  "python": "cp312",
  "machine": "x86_64",
  "why": "uv: error: No solution found when resolving dependencies cause: Because torch==2.6.0 depends on triton{platform_machine == 'x86_64' and sys_platform == 'linux'}==3.2.0 and you require triton>=3.5.0, we can conclude that your requirements and torch==2.6.0 are incompatible. And because you require torch==2.6.0, we can conclude that your requirements are unsatisfiable.",
  "instead": "mamba-ssm==2.3.1 (the newest release that installs beside this torch)"
 },
 {
  "project": "mamba-ssm",
  "version": "2.3.2.post1",
  "torch": "2.6",
  "python": "cp313",
  "machine": "x86_64",
  "why": "uv: error: No solution found when resolving dependencies cause: Because torch==2.6.0 depends on triton{platform_machine == 'x86_64' and sys_platform == 'linux'}==3.2.0 and you require triton>=3.5.0, we can conclude that your requirements and torch==2.6.0 are incompatible. And because you require torch==2.6.0, we can conclude that your requirements are unsatisfiable.",
  "instead": "mamba-ssm==2.3.1 (the newest release that installs beside this torch)"
 },
 {
  "project": "mamba-ssm",
  "version": "2.3.2.post1",
  "torch": "2.7",
  "python": "cp310",
  "machine": "x86_64",
  "why": "uv: error: No solution found when resolving dependencies cause: Because torch==2.7.1 depends on triton{platform_machine == 'x86_64' and sys_platform == 'linux'}==3.3.1 and you require triton>=3.5.0, we can conclude that your requirements and torch==2.7.1 are incompatible. And because you require torch==2.7.1, we can conclude that your requirements are unsatisfiable.",
  "instead": "mamba-ssm==2.3.1 (the newest release that installs beside this torch)"
 },
 {
  "project": "mamba-ssm",
  "version": "2.3.2.post1",
  "torch": "2.7",
  "python": "cp311",
  "machine": "x86_64",
  "why": "uv: error: No solution found when resolving dependencies cause: Because torch==2.7.1 depends on triton{platform_machine == 'x86_64' and sys_platform == 'linux'}==3.3.1 and you require triton>=3.5.0, we can conclude that your requirements and torch==2.7.1 are incompatible. And because you require torch==2.7.1, we can conclude that your requirements are unsatisfiable.",
  "instead": "mamba-ssm==2.3.1 (the newest release that installs beside this torch)"
 },
 {
  "project": "mamba-ssm",
  "version": "2.3.2.post1",
  "torch": "2.7",
  "python": "cp312",
  "machine": "x86_64",
  "why": "uv: error: No solution found when resolving dependencies cause: Because torch==2.7.1 depends on triton{platform_machine == 'x86_64' and sys_platform == 'linux'}==3.3.1 and you require triton>=3.5.0, we can conclude that your requirements and torch==2.7.1 are incompatible. And because you require torch==2.7.1, we can conclude that your requirements are unsatisfiable.",
  "instead": "mamba-ssm==2.3.1 (the newest release that installs beside this torch)"
 },
 {
  "project": "mamba-ssm",
  "version": "2.3.2.post1",
  "torch": "2.7",
  "python": "cp313",
  "machine": "x86_64",
  "why": "uv: error: No solution found when resolving dependencies cause: Because torch==2.7.1 depends on triton{platform_machine == 'x86_64' and sys_platform == 'linux'}==3.3.1 and you require triton>=3.5.0, we can conclude that your requirements and torch==2.7.1 are incompatible. And because you require torch==2.7.1, we can conclude that your requirements are unsatisfiable.",
  "instead": "mamba-ssm==2.3.1 (the newest release that installs beside this torch)"
 },
 {
  "project": "mamba-ssm",
  "version": "2.3.2.post1",
  "torch": "2.8",
  "python": "cp310",
  "machine": "x86_64",
  "why": "uv: error: No solution found when resolving dependencies cause: Because torch==2.8.0 depends on triton{platform_machine == 'x86_64' and sys_platform == 'linux'}==3.4.0 and you require triton>=3.5.0, we can conclude that your requirements and torch==2.8.0 are incompatible. And because you require torch==2.8.0, we can conclude that your requirements are unsatisfiable.",
  "instead": "mamba-ssm==2.3.1 (the newest release that installs beside this torch)"
 },
 {
  "project": "mamba-ssm",
  "version": "2.3.2.post1",
  "torch": "2.8",
  "python": "cp311",
  "machine": "x86_64",
  "why": "uv: error: No solution found when resolving dependencies cause: Because torch==2.8.0 depends on triton{platform_machine == 'x86_64' and sys_platform == 'linux'}==3.4.0 and you require triton>=3.5.0, we can conclude that your requirements and torch==2.8.0 are incompatible. And because you require torch==2.8.0, we can conclude that your requirements are unsatisfiable.",
  "instead": "mamba-ssm==2.3.1 (the newest release that installs beside this torch)"
 },
 {
  "project": "mamba-ssm",
  "version": "2.3.2.post1",
  "torch": "2.8",
  "python": "cp312",
  "machine": "x86_64",
  "why": "uv: error: No solution found when resolving dependencies cause: Because torch==2.8.0 depends on triton{platform_machine == 'x86_64' and sys_platform == 'linux'}==3.4.0 and you require triton>=3.5.0, we can conclude that your requirements and torch==2.8.0 are incompatible. And because you require torch==2.8.0, we can conclude that your requirements are unsatisfiable.",
  "instead": "mamba-ssm==2.3.1 (the newest release that installs beside this torch)"
 },
 {
  "project": "mamba-ssm",
  "version": "2.3.2.post1",
  "torch": "2.8",
  "python": "cp313",
  "machine": "x86_64",
  "why": "uv: error: No solution found when resolving dependencies cause: Because torch==2.8.0 depends on triton{platform_machine == 'x86_64' and sys_platform == 'linux'}==3.4.0 and you require triton>=3.5.0, we can conclude that your requirements and torch==2.8.0 are incompatible. And because you require torch==2.8.0, we can conclude that your requirements are unsatisfiable.",
  "instead": "mamba-ssm==2.3.1 (the newest release that installs beside this torch)"
 }
]

# GPU code a toolkit is known to compile wrong (builder/data/miscompiles.toml): an installed extension
# carrying it is a problem on that GPU; the farm's wheels serve it with other code.
MISCOMPILES = [
    {
        "project": "causal-conv1d",
        "versions": "<=1.7.0",
        "toolkit": ">=13.0",
        "arch": "sm_103",
        "serve_with": "sm_100",
        "modules": [
            "causal_conv1d_cuda"
        ],
        "note": "sm_103 runs sm_100 code (+ compute_100 PTX): nvcc 13.x miscompiles the forward and update kernels for sm_103: on a B300 the max abs error is about 0.5 and the state update is lost; the sm_100 code is bit-exact on the same GPU (https://github.com/Dao-AILab/causal-conv1d/issues/105 (the fix: https://github.com/Dao-AILab/causal-conv1d/pull/106))"
    }
]
