"""A downstream OPC UA server (asyncua's) for the gateway tests: `python gateway_downstream.py
PORT` (0: any free port) prints `listening PORT` once it listens, then serves until killed.

Namespace urn:test:plant, Objects/Line1 holding
- Counter: a Double that counts up by 1 every 50 ms (a subscriber sees every step);
- Setpoint: a writable Int32;
- Add(Int32, Int32) -> Int32;
- Alarm(String): raises a BaseEventType event on the Server object with that message.
"""
import asyncio
import sys

from asyncua import Server, ua, uamethod


async def main(port):
    s = Server()
    await s.init()
    s.set_endpoint(f"opc.tcp://127.0.0.1:{port}")
    s.set_security_policy([ua.SecurityPolicyType.NoSecurity])
    idx = await s.register_namespace("urn:test:plant")
    line = await s.nodes.objects.add_object(idx, "Line1")
    counter = await line.add_variable(idx, "Counter", 0.0)
    setpoint = await line.add_variable(idx, "Setpoint", ua.Variant(1, ua.VariantType.Int32))
    await setpoint.set_writable()
    events = await s.get_event_generator()

    @uamethod
    def add(parent, a, b):
        return ua.Variant(a + b, ua.VariantType.Int32)

    @uamethod
    async def alarm(parent, message):
        events.event.Severity = 500
        await events.trigger(message=message)

    await line.add_method(
        idx, "Add", add, [ua.VariantType.Int32, ua.VariantType.Int32], [ua.VariantType.Int32]
    )
    await line.add_method(idx, "Alarm", alarm, [ua.VariantType.String], [])
    async with s:
        print("listening", s.bserver.port, flush=True)
        n = 0.0
        while True:
            await asyncio.sleep(0.05)
            n += 1
            await counter.write_value(n)


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 0))
