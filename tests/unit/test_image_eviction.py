"""SUT and node images are evicted oldest first, never a recent one or one the engine keeps."""

from datetime import UTC, datetime
from types import SimpleNamespace

import docker.errors

from dd_accept.slurm_docker.sut_image import RECENT_SECONDS, evict_images

NOW = datetime(2026, 11, 30, 20, 0, tzinfo=UTC).timestamp()


class Engine:
    def __init__(self, ages_hours, refused=()):
        stamp = lambda hours: datetime.fromtimestamp(NOW - hours * 3600, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")  # noqa: E731
        self.listed = [SimpleNamespace(id=f"sha256:{i}", attrs={"Created": stamp(h)}) for i, h in enumerate(ages_hours)]
        self.refused, self.removed = set(refused), []
        self.images = self

    def list(self, name):
        assert name == "dd-accept/sut"
        return self.listed

    def remove(self, image_id, force):
        assert force is False, "never force: an image in use must stay"
        if image_id in self.refused:
            raise docker.errors.APIError("image has dependent child images")
        self.removed.append(image_id)


def test_the_oldest_beyond_the_count_go_and_the_engine_may_refuse():
    engine = Engine([5, 1, 30, 3, 10, 4], refused={"sha256:4"})  # sha256:4 is 10 h old but has a child
    removed = evict_images(engine, "dd-accept/sut", keep=2, now=NOW)
    assert removed == ["sha256:5", "sha256:0", "sha256:2"]  # 4 h, 5 h, 30 h; 1 h and 3 h are the kept two


def test_an_image_built_recently_is_kept_whatever_the_count():
    engine = Engine([RECENT_SECONDS / 3600 / 2] * 5)
    assert evict_images(engine, "dd-accept/sut", keep=1, now=NOW) == []
