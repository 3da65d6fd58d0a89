"""The engine model in-process: slots, FIFO order, holds, stalls, cancellation."""

import asyncio

import pytest
from prometheus_client import CollectorRegistry

from dd_accept.node.replica.engine import Engine, EngineMetrics, EngineSettings


def _engine(**settings):
    registry = CollectorRegistry()
    base = {"ttft_s": 0.0, "itl_s": 0.0, "jitter": 0.0}
    return Engine(EngineSettings(**{**base, **settings}), EngineMetrics("m", registry)), registry


def _gauge(registry, name):
    return registry.get_sample_value(name, {"model_name": "m"})


async def _consume(engine, tokens, order, label):
    produced = 0
    async for _ in engine.generate(1, tokens):
        if produced == 0:
            order.append(label)
        produced += 1
    return produced


def test_slots_limit_running_sequences_and_the_rest_wait_in_fifo_order():
    async def scenario():
        engine, registry = _engine(max_num_seqs=2)
        engine.stall(True)
        order = []
        tasks = []
        for label in range(5):
            tasks.append(asyncio.create_task(_consume(engine, 3, order, label)))
            await asyncio.sleep(0.01)
        assert (engine.running, engine.waiting) == (2, 3)
        assert (_gauge(registry, "vllm:num_requests_running"), _gauge(registry, "vllm:num_requests_waiting")) == (2, 3)
        engine.stall(False)
        assert await asyncio.gather(*tasks) == [3] * 5
        assert order == [0, 1, 2, 3, 4]
        assert (engine.running, engine.waiting) == (0, 0)
        assert registry.get_sample_value("vllm:generation_tokens_total", {"model_name": "m"}) == 15

    asyncio.run(scenario())


def test_holding_the_queue_publishes_exactly_that_depth_and_blocks_scheduling():
    async def scenario():
        engine, registry = _engine(max_num_seqs=4)
        engine.hold(7)
        assert _gauge(registry, "vllm:num_requests_waiting") == 7
        task = asyncio.create_task(_consume(engine, 2, [], "x"))
        await asyncio.sleep(0.02)
        assert not task.done() and engine.waiting == 8 and engine.running == 0
        engine.hold(0)
        assert await task == 2
        assert _gauge(registry, "vllm:num_requests_waiting") == 0

    asyncio.run(scenario())


def test_a_cancelled_waiter_leaves_the_queue_and_a_cancelled_runner_frees_its_slot():
    async def scenario():
        engine, _ = _engine(max_num_seqs=1)
        engine.stall(True)
        first = asyncio.create_task(_consume(engine, 5, [], "a"))
        await asyncio.sleep(0.01)
        second = asyncio.create_task(_consume(engine, 5, [], "b"))
        await asyncio.sleep(0.01)
        assert (engine.running, engine.waiting) == (1, 1)
        second.cancel()
        await asyncio.gather(second, return_exceptions=True)
        assert engine.waiting == 0
        first.cancel()
        await asyncio.gather(first, return_exceptions=True)
        assert engine.running == 0

    asyncio.run(scenario())


def test_seeded_jitter_is_reproducible_and_bounded():
    one, _ = _engine(seed=5, ttft_s=0.1, jitter=0.2)
    two, _ = _engine(seed=5, ttft_s=0.1, jitter=0.2)
    delays = [one._delay(0.1) for _ in range(50)]
    assert delays == [two._delay(0.1) for _ in range(50)]
    assert all(0.08 <= d <= 0.12 for d in delays)


@pytest.mark.parametrize("bad", [{"max_num_seqs": 0}, {"ttft_s": -1}, {"jitter": 1.0}])
def test_invalid_settings_are_rejected(bad):
    with pytest.raises(ValueError):
        EngineSettings(**bad)


def test_realistic_mode_queues_transiently_and_the_gauge_follows_the_scheduler_loop():
    """Like vLLM: a request waits for the next scheduler step even with a free slot, and the
    gauge changes only when the loop runs, not when a request arrives."""

    async def scenario():
        engine, registry = _engine(max_num_seqs=4, step_s=0.05, ttft_s=0.0, itl_s=0.0)
        loop = asyncio.create_task(engine.run_scheduler())
        tasks = [asyncio.create_task(_consume(engine, 1, [], n)) for n in range(6)]
        await asyncio.sleep(0.01)
        assert engine.waiting == 6 and engine.running == 0  # queued, though every slot is free
        assert _gauge(registry, "vllm:num_requests_waiting") == 0  # the loop has not published yet
        await asyncio.sleep(0.06)
        assert _gauge(registry, "vllm:num_requests_waiting") in (0, 2)  # published by the loop
        assert await asyncio.gather(*tasks) == [1] * 6
        engine.hold(7)
        assert _gauge(registry, "vllm:num_requests_waiting") != 7  # not until the next step
        await asyncio.sleep(0.08)
        assert _gauge(registry, "vllm:num_requests_waiting") == 7  # held depths stay exact
        loop.cancel()

    asyncio.run(scenario())


def test_lognormal_latencies_have_the_mean_asked_for_and_a_long_right_tail():
    engine, _ = _engine(latency="lognormal", sigma=0.5, seed=3)
    samples = sorted(engine._delay(0.1) for _ in range(20000))
    mean = sum(samples) / len(samples)
    median, p99 = samples[len(samples) // 2], samples[int(len(samples) * 0.99)]
    assert 0.097 < mean < 0.103
    assert median < mean < p99 and p99 > 2.5 * median  # skewed, unlike uniform jitter
    first, second = (_engine(latency="lognormal", sigma=0.5, seed=9)[0] for _ in range(2))
    assert [first._delay(0.1) for _ in range(50)] == [second._delay(0.1) for _ in range(50)]  # seeded
