"""A job held by its team's budget tells a researcher so without money: billing figures are for leads and admins.

The cluster's message on the held Workload carries the month's spend and cap (`BudgetStatus.held_message`, what
kubectl shows); the job page, the pending view and the jobs API word it without them and send the reader to the
team's billing page.
"""

from decimal import Decimal

import pytest
from django.urls import reverse

from billing.budget import BudgetStatus
from jobs import settling
from jobs.choices import JobState
from jobs.models import Job, Workload
from tests.billing.conftest import at
from tests.factories import JobFactory

SPENT, CAP = Decimal("1234.50"), Decimal("1000.00")
AMOUNTS = ("1,234.50", "1234.50", "1,000.00", "1000.00")


@pytest.fixture
def held(team, researcher, reserved_pool):
    job = JobFactory(team=team, pool=reserved_pool, submitted_by=researcher, state=JobState.QUEUED, name="held-job")
    message = BudgetStatus(team_id=team.pk, month=at(1).date(), cap=CAP, spent=SPENT).held_message()
    assert "1,234.50" in message  # what the cluster says, for kubectl and the controller
    Workload.objects.create(
        uid="w-held", namespace=team.namespace, name="job-held", job=job, message=message, created_at=job.created_at
    )
    settling.settle_job(job_id=job.pk)  # as the sync does: the stored pending reason
    return Job.objects.get(pk=job.pk)


def no_amounts(text: str) -> bool:
    return not any(amount in text for amount in AMOUNTS)


def test_a_researcher_reads_that_the_budget_holds_the_job_but_no_amount(client, researcher, held):
    assert "Held by the team's budget" in held.pending_reason and no_amounts(held.pending_reason)
    client.force_login(researcher)
    page = client.get(reverse("jobs:job_detail", args=[held.pk])).content.decode()
    assert "Held by the team&#x27;s budget" in page and "billing page" in page
    assert no_amounts(page)
    answer = client.get(f"/api/v1/jobs/{held.pk}/").json()
    assert "Held by the team's budget" in answer["pending_reason"]
    assert no_amounts(answer["pending_reason"])
    listed = client.get("/api/v1/jobs/").json()
    assert no_amounts(str(listed))
    pending = client.get(reverse("jobs:pending")).content.decode()
    assert "held-job" in pending and no_amounts(pending)
