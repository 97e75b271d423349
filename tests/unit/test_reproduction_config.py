"""A reproduction config as loaded: frozen dataclasses, and a field of the wrong type
refused in one line naming the file and the key."""

import dataclasses
import json
from pathlib import Path

import pytest

from sparse_attn_experiments.reproduction.config import ConfigError, load_config

CONFIG = Path(__file__).parents[2] / "configs" / "xu2021_hard_attention.json"


def test_a_loaded_config_cannot_be_changed():
    config = load_config(CONFIG)
    table = config.tables[0]
    for part, name in ((config, "max_update"), (config.smoke, "train_flags"),
                       (table, "title"), (table.rows[0], "model")):
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(part, name, getattr(part, name))


def test_the_run_settings_are_methods_of_the_config():
    """The smoke section inherits optional settings, not those of the paper's flags."""
    config = load_config(CONFIG)
    assert config.run_settings(True) is config.smoke and config.run_settings(False) is config
    assert config.run_setting(True, "average_last") == config.average_last == 5
    assert config.paper_setting(True, "average_last") is None


@pytest.mark.parametrize("edit, key", [
    (lambda c: c.update(max_update="100"), "`max_update`"),
    (lambda c: c["smoke"].update(max_update=0), "`smoke.max_update`"),
    (lambda c: c.update(name=["hard"]), "`name`"),
    (lambda c: c.update(settings_note=None), "`settings_note`"),
])
def test_a_field_of_the_wrong_type_is_one_line_naming_it(tmp_path, edit, key):
    config = json.loads(CONFIG.read_text())
    edit(config)
    path = tmp_path / "edited.json"
    path.write_text(json.dumps(config))
    with pytest.raises(ConfigError) as raised:
        load_config(path)
    message = str(raised.value)
    assert message.startswith(f"{path}: {key} must be ") and "\n" not in message
