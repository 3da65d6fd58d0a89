from dd_accept.slurm_docker import images


def test_tags_are_stable_for_an_unchanged_recipe():
    assert images.base_tag() == images.base_tag()
    assert images.slurm_tag() == images.slurm_tag()


def test_a_changed_package_list_changes_both_tags(monkeypatch):
    base, layer = images.base_tag(), images.slurm_tag()
    monkeypatch.setattr(images, "PACKAGES", (*images.PACKAGES, "strace"))
    assert images.base_tag() != base
    assert images.slurm_tag() != layer


def test_a_changed_recipe_file_changes_only_the_layer_tag(monkeypatch):
    base, layer = images.base_tag(), images.slurm_tag()
    original = images._recipe_bytes
    monkeypatch.setattr(images, "_recipe_bytes", lambda name: original(name) + (b"\n# x" if name == "dd-bg" else b""))
    assert images.base_tag() == base
    assert images.slurm_tag() != layer
