"""``/api/search-spaces``: the presets in search_spaces/, and a dry-run validator."""

from __future__ import annotations

from fastapi import APIRouter

from tuner.api._deps import Authorized, SettingsDep
from tuner.api._openapi import AUTH, responses
from tuner.api.schemas import JobCreate, SearchSpacePreset, SpaceValidation
from tuner.api.services import presets

router = APIRouter(prefix="/api/search-spaces", tags=["search-spaces"])


@router.get("", responses=responses(429))
def list_presets(settings: SettingsDep) -> list[SearchSpacePreset]:
    """Public: presets ship with SpecTune and hold no job data."""
    return presets.list_presets(settings.search_spaces_dir)


@router.post("/validate", dependencies=[Authorized], responses=responses(*AUTH, 413, 422))
def validate_search_space(body: JobCreate, settings: SettingsDep) -> SpaceValidation:
    """Check a submission without storing anything (the UI's inline validation)."""
    return presets.validation(settings, body)
