"""Telegram: `adapter` (long polling with python-telegram-bot's `Bot`, sends, files, typing
and reactions), `format` (Bot API updates in, Markdown to Telegram HTML out), `http` (the
library's networking on aiohttp, its errors mapped to `SendError`), `probe` (the doctor's
token check)."""
