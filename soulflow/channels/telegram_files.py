"""A user's file from Telegram into the chat's zone (`soulflow.channels.attachments`): size
checked before, during (the Bot API's `file_size`) and after the download, stored under a
sanitised name, prefixed with a hash of the file id, that two files of the same name cannot
share."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import PurePosixPath

from telegram import Bot
from telegram.error import TelegramError

from soulflow.bus.messages import Attachment, SendError
from soulflow.channels.attachments import ChatFiles
from soulflow.channels.telegram_format import megabytes, safe_filename


def check_size(name: str, size: int | None, limit: int) -> None:
    if size is not None and size > limit:
        raise OSError(f"{name} is {megabytes(size)}; the limit is {megabytes(limit)}")


async def download_file(bot: Callable[[], Bot], attachment: Attachment, folder: ChatFiles, *,
                        limit: int, redact: Callable[[BaseException], str]) -> PurePosixPath:
    """Fetch `attachment` with the adapter's bot (`bot()` raises if it is not started);
    OSError with the reason when it cannot be had."""
    if not attachment.file_id:
        raise OSError(f"{attachment.name} has no Telegram file id to download")
    check_size(attachment.name, attachment.size, limit)
    try:
        file = await bot().get_file(attachment.file_id)
        check_size(attachment.name, file.file_size, limit)
        data = bytes(await file.download_as_bytearray())
    except (TelegramError, SendError) as exc:
        raise OSError(f"Telegram could not deliver {attachment.name}: {redact(exc)}") from None
    check_size(attachment.name, len(data), limit)
    tag = hashlib.sha256(attachment.file_id.encode()).hexdigest()[:12]
    return await folder.save(safe_filename(attachment.name, tag), data)
