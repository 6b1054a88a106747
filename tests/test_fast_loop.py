"""The fast loop (``python -m pytest -q -m "not slow"``): ``tests/conftest.py`` marks ``slow`` every test that opens
a whole page (``new_app`` / ``AppTest``), itself, in a nested function, or through a helper or fixture of its file."""

from __future__ import annotations

import importlib.util
import sys
import types
from pathlib import Path

import conftest


def module_of(source: str) -> types.ModuleType:
    module = types.ModuleType("fake_tests")
    exec(compile(source, "fake_tests.py", "exec"), module.__dict__)  # noqa: S102 - a fixed test source
    return module


SOURCE = '''
def new_app(query=None):
    return query


def helper(text):
    return new_app({"text": text})


def test_direct():
    new_app()


def test_through_a_helper():
    helper("a dog")


def test_in_a_lambda():
    run = lambda: helper("x")  # noqa: E731
    run()


def test_model_only():
    return sum([1, 2])


def fixture_page():
    yield new_app()
'''


def test_tests_that_open_a_page_are_found_and_the_others_are_not():
    module = module_of(SOURCE)
    opens = {name: conftest._opens_page(getattr(module, name).__code__, module, set())
             for name in ("test_direct", "test_through_a_helper", "test_in_a_lambda", "test_model_only",
                          "fixture_page")}
    assert opens == {"test_direct": True, "test_through_a_helper": True, "test_in_a_lambda": True,
                     "test_model_only": False, "fixture_page": True}


def test_a_real_page_test_is_slow_and_a_model_test_is_not(request):
    test_work = sys.modules.get("test_work")  # collected already in a whole run; else read from its file
    if test_work is None:
        spec = importlib.util.spec_from_file_location("test_work", Path(__file__).parent / "app" / "test_work.py")
        test_work = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(test_work)

    page = test_work.test_a_long_input_at_beam_16_is_capped_with_a_notice
    model_only = test_work.test_the_row_estimate_bounds_what_a_pass_really_holds
    assert conftest._opens_page(page.__code__, test_work, set())
    assert not conftest._opens_page(model_only.__code__, test_work, set())
    assert not request.node.get_closest_marker("slow")  # this file is in the fast loop
