import asyncio
import logging
import sys

from asyncclient import AsyncSession
from asyncclient.testing import FakeService

# The application's logging: the library's records go where the application sends them.
logging.basicConfig(format="%(levelname)s %(name)s: %(message)s")
logging.getLogger("asyncclient").setLevel(logging.INFO)


async def main(away: float) -> None:
    service = FakeService(port=8181)  # an emulator of its own, to take down
    await service.start()
    async with AsyncSession(service.run_key, service.url) as session:
        await session.list_builds("p_demo")
        await service.stop()  # the service goes away with calls to make...
        back = service.start()  # ... and comes back `away` seconds later
        asyncio.get_running_loop().call_later(away, asyncio.ensure_future, back)
        calls = [session.list_builds("p_demo") for _ in range(20)]
        answered = await asyncio.gather(*calls)
    await service.stop()
    print(len(answered), "calls answered")


asyncio.run(main(float(sys.argv[1])))
