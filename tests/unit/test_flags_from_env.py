"""serve's flags given as the task definition's variables (processes/flags_from_env.py)."""

from __future__ import annotations

import pytest

from lambdaserve.cli import _parser
from lambdaserve.errors import InvalidInput
from lambdaserve.processes.flags_from_env import fill_from_environment
from lambdaserve.processes.rate_limit_flags import rate_limit_env

ENV = {
    "LAMBDASERVE_SERVE_TRACE_CONFIG": "triton,file=/tmp/t.json level=TIMESTAMPS rate=10",
    "LAMBDASERVE_SERVE_CACHE_CONFIG": "local,size=1048576",
    "LAMBDASERVE_RATE_LIMIT": "execution_count",
    "LAMBDASERVE_RATE_LIMIT_RESOURCES": "R1:3, R2:1:0",
}


def test_the_variables_stand_for_the_flags():
    # Given serve started with no flags, under the task definition's variables
    args = _parser().parse_args(["serve"])
    # When they are read
    fill_from_environment(args, ENV)
    # Then each is the flag it stands for
    assert args.trace_config == ["triton,file=/tmp/t.json", "level=TIMESTAMPS", "rate=10"]
    assert args.cache_config == ["local,size=1048576"]
    assert (args.rate_limit, args.rate_limit_resource) == ("execution_count", ["R1:3", "R2:1:0"])


def test_a_flag_on_the_command_line_wins():
    args = _parser().parse_args(["serve", "--trace-rate", "5", "--rate-limit-resource", "R9:1"])
    fill_from_environment(args, ENV)
    assert args.trace_config == [] and args.trace_rate == 5
    assert args.rate_limit_resource == ["R9:1"]


def test_empty_variables_change_nothing():
    args = _parser().parse_args(["serve"])
    fill_from_environment(args, dict.fromkeys(ENV, ""))
    assert (args.trace_config, args.cache_config, args.rate_limit_resource) == ([], [], [])
    assert rate_limit_env(args) == {}


def test_a_bad_variable_is_refused_as_the_flag_would_be():
    args = _parser().parse_args(["serve"])
    fill_from_environment(args, {"LAMBDASERVE_RATE_LIMIT": "sometimes"})
    with pytest.raises(InvalidInput):
        rate_limit_env(args)
