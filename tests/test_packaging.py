"""A regular install (``pip install .``, a wheel) copies only the packages setup.cfg lists;
the editable install the README uses finds every folder anyway, so a package left off the
list breaks ``import autobatch`` for everyone but us."""
import configparser
import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _listed():
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    options = cfg["options"]
    packages = {p.strip() for p in options["packages"].split() if p.strip()}
    dirs = {}
    for line in options.get("package_dir", "").splitlines():
        if "=" in line:
            name, path = (s.strip() for s in line.split("=", 1))
            dirs[name] = ROOT / path
    return packages, dirs


def test_every_package_folder_is_listed_for_installs():
    packages, dirs = _listed()
    found = {".".join(init.parent.relative_to(ROOT).parts)
             for init in (ROOT / "autobatch").rglob("__init__.py")
             if "__pycache__" not in init.parts}
    # autobatch/backends is a link made by developers for the editable layout; the
    # installed name comes from package_dir
    found.discard("autobatch.backends")
    assert found, "no packages found under autobatch/"
    assert found <= packages, f"setup.cfg [options] packages lacks {sorted(found - packages)}"
    for name in packages:
        folder = dirs.get(name, ROOT.joinpath(*name.split(".")))
        assert (folder / "__init__.py").is_file(), f"setup.cfg lists {name}, but {folder} is no package"
