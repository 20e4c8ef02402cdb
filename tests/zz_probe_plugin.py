import sys
_seen = []
def pytest_runtest_teardown(item):
    m = sys.modules.get("distutils")
    if m is not None and not _seen:
        _seen.append(1)
        with open("/tmp/distutils_probe.txt", "a") as f:
            f.write(f"after {item.nodeid}: {getattr(m, '__file__', None)}\n")
