"""Every mechanism's declaration is the one place of its options' defaults: each equals the module's own keyword
default, and every option the module takes is declared."""

import inspect

import pytest

from fairseq_eva.attention import registry

CONTRACT = {"self", "embed_dim", "num_heads", "causal", "dropout", "bias", "projections"}  # base.py's


@pytest.mark.parametrize("name", registry.choices())
def test_the_declared_defaults_are_the_modules_keyword_defaults(name):
    mechanism = registry.get(name)
    parameters = inspect.signature(mechanism.module_class().__init__).parameters
    fixed = dict(mechanism.fixed)
    for option in mechanism.options:
        assert parameters[option.name].default == option.default, (name, option.name)
    declared = {o.name for o in mechanism.options} | set(fixed)
    assert {p for p in parameters if p not in CONTRACT} <= declared, name


@pytest.mark.parametrize("name", registry.choices())
def test_a_declared_knob_and_memory_name_declared_options(name):
    mechanism = registry.get(name)
    options = {o.name for o in mechanism.options}
    assert not mechanism.knob or mechanism.knob in options
    assert mechanism.memory is None or set(mechanism.memory.options) <= options
