from dd_accept.acceptance import streaming_checks as checks


def client(request_id, chunks=13, size=2000, done=True, ttft=0.05):
    return {
        "kind": "request",
        "request_id": request_id,
        "chunks": chunks,
        "bytes": size,
        "done": done,
        "ttft_s": ttft,
        "outcome": "ok" if done else "truncated",
    }


def replica(request_id, events=13, size=2000, first_byte=0.04, status=200):
    return {
        "kind": "upstream",
        "request_id": request_id,
        "data_events": events,
        "bytes": size,
        "first_byte_s": first_byte,
        "status": status,
        "t": 1.0,
        "started": 1.0,
    }


def test_integrity_matches_each_stream_with_what_its_replica_sent():
    assert checks.integrity([client("a"), client("b")], [replica("a"), replica("b")]).verdict == "pass"
    assert checks.integrity([client("a", size=1990)], [replica("a")]).verdict == "fail"
    assert checks.integrity([client("a", done=False)], [replica("a")]).verdict == "fail"
    assert checks.integrity([client("a")], []).verdict == "fail", "a stream no replica served"


def test_no_buffering_compares_client_and_replica_ttft():
    assert checks.no_buffering([client("a", ttft=0.06)], [replica("a", first_byte=0.04)]).verdict == "pass"
    assert checks.no_buffering([client("a", ttft=0.7)], [replica("a", first_byte=0.04)]).verdict == "fail"
    assert checks.no_buffering([], []).verdict == "fail"


def phase(opened, reused, idle, accepted, requests, errors=0):
    return checks.ConnectionPhase(opened, reused, idle, accepted, requests, errors)


def test_connection_accounting():
    kept, closing = phase(24, 40, 8, 24, 64), phase(32, 32, 32, 32, 64)
    assert checks.connection_accounting(kept, closing).verdict == "pass"
    assert checks.connection_accounting(phase(40, 24, 8, 24, 64), closing).verdict == "fail", "counts swapped"
    assert checks.connection_accounting(kept, phase(0, 64, 32, 0, 64)).verdict == "fail", "reused closed ones"
    assert checks.connection_accounting(kept, phase(32, 32, 32, 32, 64, errors=1)).verdict == "fail"
