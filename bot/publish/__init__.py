"""What the bot shows: check runs, comments, report.md/report.html, charts, pages, the report artifact."""
