"""Puts the function library into the package at build time, from the repository's
one copy, ``lua/redislock.lua``: the wheel carries it as
``redis_lock_client/redislock.lua`` and the sdist as
``src/redis_lock_client/redislock.lua``, where a wheel built from the sdist (which
has no ``lua/``) finds it. The source tree keeps no second copy."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

IN_PACKAGE = "redis_lock_client/redislock.lua"


class LibraryHook(BuildHookInterface):  # type: ignore[type-arg]
    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        root = Path(self.root)
        candidates = [root.parent / "lua" / "redislock.lua", root / "src" / IN_PACKAGE]
        source = next((path for path in candidates if path.is_file()), None)
        if source is None:
            raise RuntimeError(f"the function library is missing: none of {candidates}")
        if self.target_name == "sdist":
            build_data["force_include"][str(source)] = f"src/{IN_PACKAGE}"
        elif version != "editable" and source != candidates[1]:
            # An editable install reads the repository's file where it is.
            build_data["force_include"][str(source)] = IN_PACKAGE
