"""The hook chain: every chained hooks object hears every hook it implements, in order."""

from __future__ import annotations

from inferstream.serving.hooks import HookChain, WorkerHooks


class Heard(WorkerHooks):
    def __init__(self, name: str, heard: list[tuple[str, str, int]]) -> None:
        self.name, self.heard = name, heard

    def after_task(self, model: str, ok_items: int, error_items: int) -> None:
        self.heard.append((self.name, model, ok_items))


class Decodes(Heard):
    def after_decode(self, model: str, seconds: float, ok: bool) -> None:
        self.heard.append((self.name, model, int(ok)))


def test_each_hook_reaches_the_chained_objects_that_implement_it_in_order() -> None:
    heard: list[tuple[str, str, int]] = []
    inner = HookChain(Heard("a", heard), WorkerHooks(), Decodes("b", heard))
    chain = HookChain(inner, WorkerHooks(), Heard("c", heard))
    chain.after_task("sim:ms=0", 3, 0)
    chain.after_decode("sim:ms=0", 0.001, True)
    chain.after_skip("sim:ms=0")  # implemented by none of them: nothing happens
    assert heard == [("a", "sim:ms=0", 3), ("b", "sim:ms=0", 3), ("c", "sim:ms=0", 3),
                     ("b", "sim:ms=0", 1)]


def test_a_hook_set_on_an_object_before_it_is_chained_is_heard() -> None:
    heard: list[str] = []
    hooks = WorkerHooks()
    hooks.after_rebalance = lambda: heard.append("rebalanced")  # type: ignore[method-assign]
    HookChain(WorkerHooks(), HookChain(hooks)).after_rebalance()
    assert heard == ["rebalanced"]
