"""Settings for this repository's own tests (not shipped with the plugin)."""

pytest_plugins = ["pytester"]
