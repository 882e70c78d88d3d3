"""What the bot shows on GitHub: check runs, comments, report.md/report.html, charts, the report artifact."""
