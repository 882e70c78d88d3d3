"""The service's SQLite state: campaigns and their transitions, deliveries, people, pages, publications.

See SCHEMA.md beside this file for the tables and what owns each."""
