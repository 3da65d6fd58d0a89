from dd_accept.acceptance import health_checks as checks


def test_detected_requires_503_with_exactly_one_backend_missing():
    probe = checks.Probe(503, 0.01, {"backends_ready": 3, "backends": 4}, 0.2)
    assert checks.backend_loss_detected(probe, 4, False).verdict == "pass"
    assert checks.backend_loss_detected(checks.Probe(503, 0.01, {"backends_ready": 0}, 0.2), 4, False).verdict == "fail"
    assert checks.backend_loss_detected(None, 4, False).verdict == "fail"


def test_attempt_failed_requires_a_failure_before_the_client_finished():
    assert checks.attempt_failed(70, 0.4, client_finished=False).verdict == "pass"
    assert checks.attempt_failed(137, 9.0, client_finished=True).verdict == "fail"
    assert checks.attempt_failed(0, 9.0, client_finished=True).verdict == "fail"
    assert checks.attempt_failed(None, None, client_finished=False).verdict == "fail"


def test_probe_isolation_needs_200_within_the_limit():
    assert checks.probe_isolation(checks.Probe(200, 0.1, {}, 0), 256).verdict == "pass"
    assert checks.probe_isolation(checks.Probe(503, 5.2, {}, 0), 256).verdict == "fail"
    assert checks.probe_isolation(checks.Probe(200, 6.0, {}, 0), 256).verdict == "fail"
