"""A subscriber that is about to be suspended: subscribes to the 100 BenchmarkValue variables
(10 ms sampling, queue 1000, 20 ms publishing), prints `subscribed`, then idles. The
stalled-subscriber benchmark SIGSTOPs it, so it stops reading its socket and sending Publish
requests while the server keeps producing for it."""
import asyncio
import sys

from asyncua import Client, ua


class Quiet:
    def datachange_notification(self, node, val, data):
        pass


async def main(url):
    c = Client(url, timeout=10)
    await c.connect()
    sub = await c.create_subscription(20, Quiet())
    nodes = [c.get_node(ua.NodeId(1001 + i, 1)) for i in range(100)]
    await sub.subscribe_data_change(nodes, queuesize=1000, sampling_interval=10)
    print("subscribed", flush=True)
    await asyncio.sleep(3600)


asyncio.run(main(sys.argv[1]))
