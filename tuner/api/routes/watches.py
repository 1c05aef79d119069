"""``/api/watches``: deployed servers watched against a job (register, list, show, delete)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, Response, status

from tuner.api._deps import MAX_OFFSET, Authorized, SettingsDep, StoreDep
from tuner.api._openapi import AUTH, responses
from tuner.api.schemas import WatchCreate, WatchList, WatchPublic
from tuner.api.services import watches

router = APIRouter(
    prefix="/api/watches", tags=["watches"], dependencies=[Authorized], responses=responses(*AUTH)
)

WatchId = Annotated[int, Path(ge=1, le=MAX_OFFSET, description="watch id")]


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    responses=responses(
        422, c422="bad url, a host not allowed, or unknown job_id; each error names its field"
    ),
)
def create_watch(body: WatchCreate, store: StoreDep, settings: SettingsDep) -> WatchPublic:
    """Watch a server: the service scrapes its /metrics every ``interval_s`` and keeps the
    latest verdict (the first one after one whole window). Only loopback and the hosts in
    SPECTUNE_WATCH_HOSTS may be watched."""
    return watches.create(settings, store, body)


@router.get("")
def list_watches(
    store: StoreDep,
    job_id: Annotated[int | None, Query(ge=1, le=MAX_OFFSET)] = None,
) -> WatchList:
    """Every watch (of one job with ``job_id``), with its latest verdict."""
    return watches.list_watches(store, job_id)


@router.get("/{watch_id}", responses=responses(404))
def get_watch(watch_id: WatchId, store: StoreDep) -> WatchPublic:
    return watches.get(store, watch_id)


@router.delete("/{watch_id}", status_code=status.HTTP_204_NO_CONTENT, responses=responses(404))
def delete_watch(watch_id: WatchId, store: StoreDep) -> Response:
    watches.delete(store, watch_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
