"""The histories changes leave, for metering and billing to read as they were at each moment: a pool's contract
(`ContractChange`) and prices (`PriceChange`), written by `services.save_pool` in its transaction; and a reservation's
lending (`LendingChange`, written by `services.set_lending`), read back by `lending_at`."""

from datetime import UTC, datetime, timedelta

from django.utils import timezone

from .choices import Lending
from .models import ContractChange, LendingChange, Pool, PriceChange


def record_contract(*, pool: Pool, previous: Pool | None, user) -> None:
    """A row from now on when the contract is new or changed; a pool with no row yet first gets its previous contract
    from its creation, so days before now keep it."""
    if previous is not None and previous.is_reserved and previous.contracted_gpus == pool.contracted_gpus:
        return
    if previous is not None and previous.contracted_gpus is not None and not pool.contract_changes.exists():
        ContractChange.objects.create(
            pool=pool, contracted_gpus=previous.contracted_gpus, effective_from=pool.created_at
        )
    ContractChange.objects.create(
        pool=pool, contracted_gpus=pool.contracted_gpus, effective_from=timezone.now(), changed_by=user
    )


def record_prices(*, pool: Pool, previous: Pool | None, user) -> None:
    """A new pool's prices from the day it is made; changed prices from the next UTC day (a day is priced once, at
    the prices in force all of it). A pool with no row yet first gets its previous prices from its creation, so the
    days before keep them."""
    prices = (pool.hourly_price_per_gpu, pool.lending_price_share)
    today = timezone.now().astimezone(UTC).date()
    if previous is None:
        PriceChange.objects.create(
            pool=pool, hourly_price_per_gpu=prices[0], lending_price_share=prices[1], effective_from=today,
            changed_by=user,
        )  # fmt: skip
        return
    if (previous.hourly_price_per_gpu, previous.lending_price_share) == prices:
        return
    if not pool.price_changes.exists():
        PriceChange.objects.create(
            pool=pool,
            hourly_price_per_gpu=previous.hourly_price_per_gpu,
            lending_price_share=previous.lending_price_share,
            effective_from=min(pool.created_at.astimezone(UTC).date(), today),
        )
    PriceChange.objects.create(
        pool=pool, hourly_price_per_gpu=prices[0], lending_price_share=prices[1],
        effective_from=today + timedelta(days=1), changed_by=user,
    )  # fmt: skip


def lending_at(changes: list[LendingChange], at: datetime) -> tuple[str, int]:
    """The (lending, protected GPUs) in force at `at` among one reservation's `changes` (ordered by
    `effective_from`): the latest at or before it, else the default (lend idle GPUs, none protected)."""
    setting = (Lending.IDLE, 0)
    for change in changes:
        if change.effective_from > at:
            break
        setting = (change.lending, change.protected_gpus)
    return setting
