"""What a process asks for before SGLang parses its arguments (the plugin's question on an
SGLang the gate cannot run on), and the precedence it shares with GateServerArgs."""

from __future__ import annotations

import pytest

from sglang_specgate.threshold_setting import ThresholdSetting, requested_before_parsing

FLAG = "--speculative-disable-batch-threshold"
ENV = "SGLANG_SPEC_DISABLE_BATCH_THRESHOLD"
EAGLE = ["--model-path", "/models/target", "--speculative-algorithm", "EAGLE3"]


@pytest.mark.parametrize("argv, n", [
    (EAGLE + [FLAG, "8"], 8),
    (EAGLE + [f"{FLAG}=8"], 8),
    (["serve"] + EAGLE + [FLAG, "8", FLAG, "0"], 0),  # the last one wins, as in argparse
    (EAGLE + [FLAG, "0"], 0),  # 0: never disable, the gate is not asked for
    (EAGLE + [FLAG, "auto"], "auto"),
    (EAGLE + [f"{FLAG}=Auto"], "auto"),
    (EAGLE + [FLAG, "lots"], 0),  # not a count: left to a supported SGLang's parser
    ([FLAG], 0),  # no value
    (EAGLE, 0),
])
def test_the_command_line(argv, n):
    assert requested_before_parsing(argv, {}) == ThresholdSetting(n)


def test_the_environment_asks_only_where_the_command_line_speculates():
    assert requested_before_parsing(EAGLE, {ENV: " 8 "}) == ThresholdSetting(8, from_env=True)
    assert requested_before_parsing(["--model-path", "m"], {ENV: "8"}) == ThresholdSetting(0, ignored_env=8)
    assert requested_before_parsing(EAGLE + [FLAG, "0"], {ENV: "8"}) == ThresholdSetting(0)  # the flag wins
    assert requested_before_parsing(EAGLE + [FLAG, "4"], {ENV: "lots"}) == ThresholdSetting(4)  # env unread
    assert requested_before_parsing(EAGLE, {ENV: ""}) == ThresholdSetting(0)
    assert requested_before_parsing(EAGLE, {ENV: "auto"}) == ThresholdSetting("auto", from_env=True)
    assert requested_before_parsing(["--model-path", "m"], {ENV: "auto"}) == ThresholdSetting(0, ignored_env="auto")


def test_the_config_file_under_the_command_line(tmp_path):
    config = tmp_path / "server.yaml"
    config.write_text("speculative-algorithm: EAGLE3\nspeculative-disable-batch-threshold: 16\n"
                      "enable-metrics: true\ncuda-graph-bs: [1, 2]\n")
    setting = requested_before_parsing(["--model-path", "m", "--config", str(config)], {})
    assert setting == ThresholdSetting(16, config=str(config))
    assert str(setting) == f"speculative-disable-batch-threshold: 16 in {config}"
    assert setting.removal == f"remove speculative-disable-batch-threshold from {config}"
    # the command line's value wins, as SGLang merges them
    assert requested_before_parsing(["--config", str(config), FLAG, "0"], {}) == ThresholdSetting(0)
    # the algorithm in the file makes the environment's threshold count
    config.write_text("speculative-algorithm: EAGLE3\n")
    assert requested_before_parsing(["--config", str(config)], {ENV: "8"}) == ThresholdSetting(8, from_env=True)


@pytest.mark.parametrize("content", [None, "- not\n- a mapping\n", "key: [unclosed\n"])
def test_a_config_file_that_does_not_read_asks_for_nothing(tmp_path, content):
    # SGLang's own parser reports the file.
    config = tmp_path / "server.yaml"
    if content is not None:
        config.write_text(content)
    assert requested_before_parsing(EAGLE + ["--config", str(config)], {}) == ThresholdSetting(0)
