"""`toolserver openenv-package`: a profile written out as an OpenEnv environment package (without `openenv`: the
package's own tests with `openenv` 0.10, `openenv validate` and a running Space, are
tests_frameworks/test_openenv_package.py)."""

import ast

import pytest
import yaml

from toolserver.cli import main
from toolserver.integrations.openenv_package import FILES, names, write_package
from toolserver.profiles import PROFILES


def test_names_follow_autoenv_conventions():
    assert names("nemo-gym") == {"__MODULE__": "toolserver_nemo_gym_env", "__CLASS__": "ToolserverNemoGym",
                                 "__PROFILE__": "nemo-gym"}
    assert names("default")["__MODULE__"] == "toolserver_default_env"


@pytest.mark.parametrize("profile", list(PROFILES))
def test_every_profile_writes_a_whole_package(profile, tmp_path):
    written = write_package(profile, tmp_path, url="http://toolserver:8000", concurrency=16)
    assert sorted(p.relative_to(tmp_path).as_posix() for p in written) == sorted(FILES)
    manifest = yaml.safe_load((tmp_path / "openenv.yaml").read_text())
    assert manifest["name"] == names(profile)["__MODULE__"] and manifest["app"] == "server.app:app"
    assert manifest["variables"] == {"TOOLSERVER_URL": "http://toolserver:8000", "TOOLSERVER_PROFILE": profile,
                                     "TOOLSERVER_MAX_CONCURRENT_ENVS": "16"}
    assert manifest["validation"]["capabilities"]["declared_tools"] == list(PROFILES[profile].tools)
    for path in written:
        text = path.read_text()
        assert "__" + "MODULE__" not in text and "__" + "CLASS__" not in text, path
        if path.suffix == ".py":
            ast.parse(text)
    app = (tmp_path / "server" / "app.py").read_text()
    assert "SUPPORTS_CONCURRENT_SESSIONS = True" in app and "max_concurrent_envs=MAX_CONCURRENT_ENVS" in app


def test_the_command(tmp_path, capsys):
    assert main(["openenv-package", "mgpo", str(tmp_path / "out"), "--url", "http://x:1"]) == 0
    assert (tmp_path / "out" / "client.py").exists()
    assert main(["openenv-package", "no-such-profile", str(tmp_path / "none")]) == 2
    assert "no-such-profile" in capsys.readouterr().err and not (tmp_path / "none").exists()
