import pytest

from dd_accept.base.errors import UsageError
from dd_accept.sut.profile import builtin_profiles, parse_profile, profile_for


def _builtin_text():
    from importlib import resources

    return resources.files("dd_accept.sut").joinpath("profiles", "data-designer-slurm-1.0.toml").read_text()


def test_builtin_profile_matches_rc1_and_1_0_releases_only():
    assert profile_for("data-designer-slurm", "1.0.0rc1").name == "data-designer-slurm-1.0"
    assert profile_for("Data_Designer_Slurm", "1.0.3").name == "data-designer-slurm-1.0"
    with pytest.raises(UsageError, match="no built-in profile"):
        profile_for("data-designer-slurm", "2.0.0")
    with pytest.raises(UsageError, match="pass --profile FILE"):
        profile_for("something-else", "1.0.0")


def test_proxy_command_is_rendered_as_the_sut_builds_it():
    (profile,) = builtin_profiles()
    argv = profile.proxy_argv(
        python="/opt/sut/bin/python",
        site_packages="/sp",
        port=9000,
        backends=[("node1", 8100), ("node1", 8101), ("node2", 8100)],
        retry_after=3,
    )
    assert argv == [
        "/opt/sut/bin/python",
        "/sp/data_designer/slurm/runtime/proxy.py",
        "--listen-port",
        "9000",
        "--health-path",
        "/health",
        "--retry-after-seconds",
        "3",
        "--allowed-host",
        "node1",
        "--allowed-host",
        "node2",
        "--backend",
        "http://node1:8100",
        "--backend",
        "http://node1:8101",
        "--backend",
        "http://node2:8100",
    ]
    assert "--retry-after-seconds" not in profile.proxy_argv(
        python="p", site_packages="s", port=1, backends=[("h", 2)], retry_after=None
    )


@pytest.mark.parametrize(
    ("edit", "needle"),
    [
        (
            lambda t: t.replace("[capabilities]", "[capabilities]\nhealth_monitr = true"),
            "unknown key capabilities.health_monitr",
        ),
        (
            lambda t: t.replace("max_upstream_attempts = 3", 'max_upstream_attempts = "3"'),
            "attempts must be a whole number",
        ),
        (lambda t: t.replace("health_monitor = false\n", ""), "missing key capabilities.health_monitor"),
        (
            lambda t: t.replace('node_loss = "fail"', 'node_loss = "retry"'),
            r"profile custom.toml: capabilities.node_loss must be one of fail, recover, got 'retry'",
        ),
        (lambda t: t.replace('versions = ">=1.0.0rc1,<1.1"', 'versions = "one point oh"'), "not a version range"),
        (lambda t: t + "\n[extra]\nx = 1\n", "unknown key extra"),
        (lambda t: t.replace("[proxy]", "[proxy"), "not valid TOML"),
        (
            lambda t: t.replace('exempt_paths = ["/health",', 'exempt_paths = ["health",'),
            r"profile custom.toml: queue_admission.exempt_paths: each is a URL path, starting with /",
        ),
        (
            lambda t: t.replace('"--health-path", "/health"]', '"--health-path", 7]'),
            r"command\[\d+\] must be a string",
        ),
        (  # a launch path without the manifest it reads: the drill could not start the endpoint through it
            lambda t: t.replace('manifest_variable = "DD_RUNTIME_MANIFEST"\n', ""),
            r"profile custom.toml: cleanup.launch_script, launch_function and manifest_variable are declared together",
        ),
    ],
)
def test_bad_profiles_are_rejected_with_the_key_named(edit, needle):
    with pytest.raises(UsageError, match=needle):
        parse_profile(edit(_builtin_text()), "custom.toml")
