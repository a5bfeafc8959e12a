"""The API's page of jobs (GET /api/v1/jobs/) in one SQL statement: the page's rows, the count of every job the
filters keep and the GPUs each job of the page borrows, written once from the ORM's own compilation and completed on
each request with the request's visibility, filters and order.

Why: building that page through the ORM (the FilterSet's queryset, values(), the paginator's count and page) cost
about 3 ms of CPU a request in Django's query building and compiling alone, twice what the database and the JSON
cost (issue 30, docs/benchmarks.md). Nothing here decides anything the ORM does not decide elsewhere:

- which teams' jobs the user sees is `Team.objects.visible_to(user)`, compiled on each request (all teams: no
  condition);
- each filter is the JobFilterSet's own, read from its validated form (`FilterBackend.valid_filterset`: the same
  messages for a bad value) and written as its field's column and lookup (`filter_conditions`); a filter whose kind
  is not translated here makes the view take the ORM's path;
- the columns and joins are `job_list_values`'s, compiled once (`_page_select`);
- the borrowed GPUs are `selectors.borrowed_gpus`'s SQL, asked for the page's jobs.

The count is a subquery of its own, not `count(*) OVER ()` beside each row: a window makes PostgreSQL join and sort
every job the filters keep before the limit (tried at b7a438a: twice the database time of the count and the page).

tests/jobs/test_api_listing.py holds every page to the ORM's answer for the same users, filters and orders.
"""

import functools
from dataclasses import dataclass

import django_filters
from django.core.exceptions import EmptyResultSet
from django.db import connection

from portal.api.base import ordered_uniquely
from portal.models import Team

from .. import selectors
from ..models import Job
from .serializers import LIST_ID, job_list_values

# A filter's lookup as SQL: the column's operator and how the value is given.
_OPERATORS = {"exact": "=", "gt": ">", "gte": ">=", "lt": "<", "lte": "<="}
_ID = connection.ops.quote_name(Job._meta.pk.column)


@dataclass(frozen=True)
class JobsPage:
    rows: list[tuple]  # `job_list_values` rows, in the page's order
    count: int | None  # jobs the filters keep; None when the page read no row (past the last page, or none at all)
    borrowed_gpus: dict[int, int]  # `selectors.borrowed_gpus` of the page's jobs, read in the same statement


@functools.cache
def _page_select() -> str:
    """SELECT ... FROM ... of `job_list_values` (its columns, its joins for the related slugs, no condition)."""
    queryset = job_list_values(Job.objects.order_by())
    compiler = queryset.query.get_compiler(connection.alias)
    sql, params = compiler.as_sql()
    if params or compiler.get_converters([column for column, _sql, _alias in compiler.select]):
        # The rows are read as the database answers them: a column that wanted converting would be read wrong.
        raise RuntimeError("the jobs page's columns changed: a parameter or a converter appeared")
    return sql


_TABLE = connection.ops.quote_name(Job._meta.db_table)


def _column(name: str, table: str = _TABLE) -> str:
    """The column of the job's field `name`, in the jobs table or in `table` (a subquery of its rows)."""
    return f"{table}.{connection.ops.quote_name(Job._meta.get_field(name).column)}"


def filter_conditions(filterset) -> tuple[list[str], list] | None:
    """The conditions of `filterset`'s validated filters as SQL on the jobs table, with their parameters; None when
    one of them is of a kind not written here (the caller then filters with the ORM). A filter left empty filters
    nothing, as django-filter does."""
    conditions, params = [], []
    for name, value in filterset.form.cleaned_data.items():
        flt = filterset.filters[name]
        if value in django_filters.constants.EMPTY_VALUES:
            continue
        if flt.method is not None or flt.exclude or flt.lookup_expr not in _OPERATORS or "__" in flt.field_name:
            return None
        column = _column(flt.field_name)
        if isinstance(flt, django_filters.MultipleChoiceFilter):
            if flt.conjoined or flt.lookup_expr != "exact":
                return None
            conditions.append(f"{column} = ANY(%s)")
            params.append(list(value))
        elif isinstance(flt, django_filters.ModelChoiceFilter):
            if flt.lookup_expr != "exact":
                return None
            conditions.append(f"{column} = %s")
            params.append(value.pk)
        elif isinstance(flt, django_filters.ChoiceFilter | django_filters.IsoDateTimeFilter):
            conditions.append(f"{column} {_OPERATORS[flt.lookup_expr]} %s")
            params.append(value)
        else:
            return None
    return conditions, params


def ordered(terms: list[str]) -> list[str]:
    """The order `terms` asks for (field names, `-` for descending), the id breaking ties (newest first) unless it
    is already in it: a page never repeats or skips a job of the one before (the API's one rule,
    `portal.api.base.ordered_uniquely`)."""
    return ordered_uniquely(terms, Job)


def _order(terms: list[str], table: str = _TABLE) -> str:
    """ORDER BY's terms on the columns of `table`."""
    return ", ".join(
        f"{_column(term.lstrip('-'), table)} {'DESC' if term.startswith('-') else 'ASC'}" for term in ordered(terms)
    )


def jobs_page(user, *, conditions: list[str], params: list, ordering: list[str], number: int, size: int) -> JobsPage:
    """Page `number` (from 1) of `size` jobs among those `user` may see that meet `conditions` (`filter_conditions`),
    in `ordering` (field names, `-` for descending, from the view's `ordering_fields`), with the count of all of
    them and the GPUs each borrows (`selectors.borrowed_gpus`), in one statement."""
    select = _page_select()
    teams = Team.objects.visible_to(user)
    where, where_params = list(conditions), list(params)
    if teams.query.has_filters():
        try:
            teams_sql, teams_params = teams.order_by().values("pk").query.sql_with_params()
        except EmptyResultSet:  # no team at all (a visitor who is not signed in)
            return JobsPage(rows=[], count=None, borrowed_gpus={})
        where.insert(0, f"{_column('team')} IN ({teams_sql})")
        where_params[:0] = teams_params
    condition = " WHERE " + " AND ".join(f"({one})" for one in where) if where else ""
    # The count runs once: it refers to nothing outside it.
    rows_sql = select.replace("SELECT ", f"SELECT (SELECT count(*) FROM {_TABLE}{condition}) AS page_count, ", 1)
    rows_sql += f"{condition} ORDER BY {_order(ordering)} LIMIT %s OFFSET %s"
    borrowed_sql, borrowed_params = selectors.borrowed_gpus_sql(f"IN (SELECT {_ID} FROM page)", [], only_those=False)
    sql = (
        f"WITH page AS ({rows_sql}), borrowed AS ({borrowed_sql}) "
        f"SELECT page.*, coalesce(borrowed.gpus, 0) FROM page LEFT JOIN borrowed ON borrowed.id = page.{_ID} "
        f"ORDER BY {_order(ordering, 'page')}"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [*where_params, *where_params, size, (number - 1) * size, *borrowed_params])
        fetched = cursor.fetchall()
    if not fetched:
        return JobsPage(rows=[], count=None, borrowed_gpus={})
    return JobsPage(
        rows=[row[1:-1] for row in fetched],
        count=fetched[0][0],
        borrowed_gpus={row[1 + LIST_ID]: row[-1] for row in fetched if row[-1]},
    )
