"""builder/building/images/engine.py: the one image-build loop the executors and the hipcc image share, on a real engine."""

from __future__ import annotations

from pathlib import Path

import pytest
from farmkit import docker_client

from builder.building.images.engine import build_image, connect, image_exists
from builder.building.images.images import IMAGE_LABEL, LABEL, image_tag, local_name
from builder.errors import EngineUnavailable


@pytest.fixture(scope="module")
def base():
    docker_client()  # skips without an engine
    name = local_name("bookworm")
    if not image_exists(connect(), name):
        pytest.skip(f"{name} is not made here (python -m builder base-image)")
    return name


@pytest.mark.docker
def test_an_image_builds_with_the_farm_label_and_its_log(base: str, tmp_path: Path) -> None:
    client = connect()
    tag = image_tag("engine-test", "ok")
    (tmp_path / "note.txt").write_text("staged\n")
    log = tmp_path / "image.log"
    try:
        seconds = build_image(
            client, tag, f"FROM {base}\nCOPY note.txt extra.txt /opt/\nRUN cat /opt/note.txt /opt/extra.txt\n",
            what="the test image", labels={IMAGE_LABEL: "engine-test"}, files={"note.txt": tmp_path / "note.txt"},
            stage=lambda ctx: (ctx / "extra.txt").write_text("from stage\n"), log_path=log,
        )  # fmt: skip
        assert seconds >= 0
        labels = client.images.get(tag).labels
        assert labels[LABEL] == "1" and labels[IMAGE_LABEL] == "engine-test"
        assert "staged" in log.read_text() and "from stage" in log.read_text()
    finally:
        client.images.remove(tag, force=True)


@pytest.mark.docker
def test_a_failing_step_raises_the_given_error_with_the_output_tail(base: str, tmp_path: Path) -> None:
    client = connect()
    tag = image_tag("engine-test", "broken")
    log = tmp_path / "image.log"
    with pytest.raises(EngineUnavailable) as err:
        build_image(
            client, tag, f"FROM {base}\nRUN echo the-last-words && exit 3\n",
            what="the test image", log_path=log, hint="look at the log",
        )  # fmt: skip
    text = str(err.value)
    assert text.startswith("the test image failed to build:") and "non-zero code: 3" in text, text
    assert "the-last-words" in text and f"log: {log}" in text and err.value.hint == "look at the log"
    assert "the-last-words" in log.read_text()
    assert not image_exists(client, tag)


@pytest.mark.docker
def test_two_runs_that_need_a_missing_image_make_it_once(base: str, tmp_path: Path) -> None:
    """Two farm runs on one host (two test workers, two release jobs) that both find an image missing: one makes
    it, the other waits on the host-wide lock and then finds it; a make that fails leaves the lock free."""
    import threading

    from builder.building.images.engine import made_once

    client = connect()
    tag = image_tag("engine-test", "once")
    made: list[str] = []

    def make() -> None:
        made.append(threading.current_thread().name)
        dockerfile = f"FROM {base}\nRUN sleep 2\n"
        build_image(client, tag, dockerfile, what="the test image", labels={IMAGE_LABEL: "engine-test"})

    results: dict[str, bool] = {}
    runs = [threading.Thread(target=lambda n=n: results.__setitem__(n, made_once(client, tag, make)), name=n)
            for n in ("first", "second")]  # fmt: skip
    try:
        for t in runs:
            t.start()
        for t in runs:
            t.join(timeout=300)
        assert len(made) == 1 and sorted(results.values()) == [False, True], (made, results)
        assert image_exists(client, tag) and not made_once(client, tag, make) and len(made) == 1

        def broken() -> None:
            raise EngineUnavailable("the engine went away")

        other = image_tag("engine-test", "never")
        with pytest.raises(EngineUnavailable):
            made_once(client, other, broken)
        with pytest.raises(EngineUnavailable):  # the lock was released: a second try runs, not waits forever
            made_once(client, other, broken)
    finally:
        client.images.remove(tag, force=True)
