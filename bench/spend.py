"""Benchmark: how good the month-end forecast is, and what following the reservation advice would have saved.

Generates 12-month histories of GPU use, hour by hour, for teams of four shapes, each holding a reservation (its
contract) in a reserved pool and running above it on elastic GPUs at the hourly price:

- steady: a level around the reservation with a day/night swing and noise;
- growing: the same, growing by about 8 % a month;
- bursty: a low level with bursts of a few days at two to three times the reservation;
- deadline: quiet, then a crunch in the week before a deadline every five to seven weeks; the crunch's work is
  submitted (queued) three days ahead.

Forecast (`billing.forecast.forecast_month`): on day 10 and day 20 of each month from the second on, the month's
bill is forecast from the history so far (the daily variable costs) and the work queued then (the variable cost of
the days whose work is already submitted: the next day for every shape, the next three for the deadline team); it
is compared with the month's real bill. Printed: the median relative error of each day's forecast, and how often
the real bill fell in the 80 % interval (target: 70–90 %).

Advice (`billing.advice.advise`): for each month k from the first to the eleventh, the advice made from months
1..k (the last three of them at most, as the billing page does) is priced on month k+1 against the contract.
Printed: how often following it would have cost less than keeping the contract, how often no more, and the total
saving.

No database and no cluster: pure arithmetic on generated data, seeded, so a run repeats exactly.

    .venv/bin/python bench/spend.py                     # 5 teams per shape
    .venv/bin/python bench/spend.py --teams-per-shape 1 # the smoke size (tests/bench/)
"""

import argparse
import calendar
import math
import random
import statistics
import sys
from collections import Counter
from datetime import date
from decimal import Decimal
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.harness import NUMBER, Run, logger  # noqa: E402
from billing.advice import advise, exact_cost  # noqa: E402
from billing.forecast import forecast_month  # noqa: E402

SUMMARY_KEYS = {
    "teams": int,
    "forecasts": int,
    "forecast.day_10_median_error_percent": NUMBER,
    "forecast.day_20_median_error_percent": NUMBER,
    "forecast.interval_coverage_percent": NUMBER,
    "forecast.by_shape": dict,
    "advice.backtests": int,
    "advice.cheaper_percent": NUMBER,
    "advice.no_dearer_percent": NUMBER,
    "advice.total_saving": NUMBER,
    "advice.total_contract_cost": NUMBER,
}

SHAPES = ("steady", "growing", "bursty", "deadline")
MONTHS = 12
FIRST_MONTH = date(2025, 1, 1)
MONTHLY_PRICE = Decimal("12000")  # per reserved GPU and month
HOURLY_PRICE = Decimal("30")  # per elastic (or overage) GPU-hour: reserving pays above ~400 hours a month
FORECAST_DAYS = (10, 20)
FIT_MONTHS = 3
log = logger("spend")


def month_days(index: int) -> int:
    year, month = FIRST_MONTH.year + (FIRST_MONTH.month - 1 + index) // 12, (FIRST_MONTH.month - 1 + index) % 12 + 1
    return calendar.monthrange(year, month)[1]


def generate(shape: str, seed: int) -> tuple[int, list[list[int]], int]:
    """(contract GPUs, per month the GPUs in use hour by hour, days of work known ahead) of one team."""
    rng = random.Random(seed)
    contract = rng.choice([4, 8, 8, 16])
    months, day_index = [], 0
    next_deadline = rng.randint(25, 45)
    burst_left, burst_level = 0, 0.0
    for month in range(MONTHS):
        hours = []
        for _day in range(month_days(month)):
            if shape == "steady":
                level = contract * rng.uniform(0.75, 1.05)
            elif shape == "growing":
                level = contract * 0.6 * (1.08 ** (day_index / 30)) * rng.uniform(0.85, 1.1)
            elif shape == "bursty":
                if burst_left == 0 and rng.random() < 0.07:
                    burst_left, burst_level = rng.randint(2, 5), contract * rng.uniform(2.0, 3.0)
                level = burst_level if burst_left else contract * rng.uniform(0.2, 0.5)
                burst_left = max(0, burst_left - 1)
            else:  # deadline
                to_deadline = next_deadline - day_index
                level = contract * (rng.uniform(1.6, 2.4) if to_deadline < 7 else rng.uniform(0.3, 0.7))
                if to_deadline <= 0:
                    next_deadline = day_index + rng.randint(35, 49)
            for hour in range(24):
                swing = 1 + 0.25 * math.sin((hour - 8) / 24 * 2 * math.pi)
                hours.append(max(0, round(level * swing * rng.uniform(0.9, 1.1))))
            day_index += 1
        months.append(hours)
    return contract, months, 3 if shape == "deadline" else 1


def daily_variable(hours: list[int], contract: int) -> list[Decimal]:
    """What each day's use above the contract cost at the hourly price."""
    return [
        sum(max(0, level - contract) for level in hours[start : start + 24]) * HOURLY_PRICE
        for start in range(0, len(hours), 24)
    ]


def forecasts_of(contract: int, months: list[list[int]], ahead: int) -> list[dict]:
    daily = [daily_variable(hours, contract) for hours in months]
    fixed = contract * MONTHLY_PRICE
    results = []
    for month in range(1, MONTHS):
        history = [cost for earlier in daily[:month] for cost in earlier]
        actual = fixed + sum(daily[month], Decimal(0))
        for day in FORECAST_DAYS:
            so_far = daily[month][:day]
            queued = sum(daily[month][day : day + ahead], Decimal(0))
            forecast = forecast_month(
                days_in_month=len(daily[month]),
                days_elapsed=day,
                fixed=fixed,
                daily_variable=history + so_far,
                queued=queued,
            )
            results.append(
                {
                    "day": day,
                    "error": float(abs(forecast.expected - actual) / actual),
                    "covered": forecast.low <= actual <= forecast.high,
                }
            )
    return results


def backtest_advice(contract: int, months: list[list[int]]) -> list[dict]:
    prices = {"monthly_price": MONTHLY_PRICE, "hourly_price": HOURLY_PRICE}
    levels = [Counter() for _ in months]
    for index, hours in enumerate(months):
        for level in hours:
            levels[index][level] += 3600
    results = []
    for k in range(1, MONTHS):
        fitted = levels[max(0, k - FIT_MONTHS) : k]
        merged = Counter()
        for month in fitted:
            merged.update(month)
        advice = advise(merged, current_gpus=contract, months=len(fitted), **prices)
        size = advice.advised.reserved_gpus
        advised_cost = exact_cost(levels[k], size, months=1, **prices)
        contract_cost = exact_cost(levels[k], contract, months=1, **prices)
        results.append({"advised": size, "advised_cost": advised_cost, "contract_cost": contract_cost})
    return results


def percent(part: int, whole: int) -> float:
    return round(100 * part / whole, 1) if whole else 0.0


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    parser.add_argument("--teams-per-shape", type=int, default=5)
    parser.add_argument("--seed", type=int, default=29)
    args = parser.parse_args()
    run = Run("spend")
    forecasts, backtests, by_shape = [], [], {}
    for shape_index, shape in enumerate(SHAPES):
        shape_forecasts = []
        for team in range(args.teams_per_shape):
            contract, months, ahead = generate(shape, args.seed * 1000 + shape_index * 100 + team)
            shape_forecasts += forecasts_of(contract, months, ahead)
            backtests += backtest_advice(contract, months)
        forecasts += shape_forecasts
        by_shape[shape] = {
            f"day_{day}_median_error_percent": round(
                100 * statistics.median(f["error"] for f in shape_forecasts if f["day"] == day), 1
            )
            for day in FORECAST_DAYS
        } | {"interval_coverage_percent": percent(sum(f["covered"] for f in shape_forecasts), len(shape_forecasts))}
        log(f"{shape}: {by_shape[shape]}")
    forecast_summary = {
        f"day_{day}_median_error_percent": round(
            100 * statistics.median(f["error"] for f in forecasts if f["day"] == day), 1
        )
        for day in FORECAST_DAYS
    }
    forecast_summary["interval_coverage_percent"] = percent(sum(f["covered"] for f in forecasts), len(forecasts))
    forecast_summary["by_shape"] = by_shape
    saving = sum((b["contract_cost"] - b["advised_cost"] for b in backtests), 0)
    advice_summary = {
        "backtests": len(backtests),
        "cheaper_percent": percent(sum(b["advised_cost"] < b["contract_cost"] for b in backtests), len(backtests)),
        "no_dearer_percent": percent(sum(b["advised_cost"] <= b["contract_cost"] for b in backtests), len(backtests)),
        "total_saving": round(float(saving), 2),
        "total_contract_cost": round(float(sum((b["contract_cost"] for b in backtests), 0)), 2),
    }
    print(
        f"forecast: median error day 10 {forecast_summary['day_10_median_error_percent']} %, "
        f"day 20 {forecast_summary['day_20_median_error_percent']} %; "
        f"80 % interval covered the real bill in {forecast_summary['interval_coverage_percent']} % of months"
    )
    print(
        f"advice: cheaper than the contract in {advice_summary['cheaper_percent']} % of next months "
        f"(no dearer in {advice_summary['no_dearer_percent']} %), total saving {advice_summary['total_saving']}"
    )
    run.finish(
        {
            "teams": args.teams_per_shape * len(SHAPES),
            "forecasts": len(forecasts),
            "forecast": forecast_summary,
            "advice": advice_summary,
        }
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
