"""Usage intervals, daily rollups and invoices arrive with the metering issue; the app exists so that the layout
is the project's from the start."""
