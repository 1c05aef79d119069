"""``/api/search-spaces``: the presets in search_spaces/, and a dry-run validator."""

from __future__ import annotations

from fastapi import APIRouter

from tuner.api import _service
from tuner.api._deps import Authorized, SettingsDep
from tuner.api.schemas import JobCreate, SearchSpacePreset, SpaceValidation

router = APIRouter(prefix="/api/search-spaces", tags=["search-spaces"])


@router.get("")
def list_presets(settings: SettingsDep) -> list[SearchSpacePreset]:
    """Public: presets ship with SpecTune and hold no job data."""
    return _service.list_presets(settings.search_spaces_dir)


@router.post("/validate", dependencies=[Authorized])
def validate(body: JobCreate, settings: SettingsDep) -> SpaceValidation:
    """Check a submission without storing anything (the UI's inline validation)."""
    space, _ = _service.resolve_space(settings, body)
    return SpaceValidation(
        name=space.name,
        n_trials=space.trials,
        methods=space.methods.enabled(),
        slo=space.slo.limits(),
        concurrency=list(space.concurrency),
    )
