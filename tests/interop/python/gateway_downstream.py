"""A downstream OPC UA server (asyncua's) for the gateway tests: `python gateway_downstream.py
PORT` (0: any free port) prints `listening PORT HISTORY_START` once it listens, then serves until killed.

Namespace urn:test:plant, Objects/Line1 holding
- Counter: a Double that counts up by 1 every 50 ms (a subscriber sees every step);
- Setpoint: a writable Int32;
- Add(Int32, Int32) -> Int32;
- Alarm(String): raises a BaseEventType event on the Server object with that message;
- Grow(String): adds a Double Variable of that name under Line1 and raises a
  GeneralModelChangeEvent (NodeAdded) on the Server object;
- History: a Double historized in asyncua's in-memory store (Server.historize_node_data_change)
  holding the values 0..9 at one-second steps an hour ago (HISTORY_START), served at most 4
  values per answer (the rest behind a continuation point).
"""
import asyncio
import sys
from datetime import datetime, timedelta, timezone

from asyncua import Server, ua, uamethod
from asyncua.server.history import HistoryDict

# The first historized value's SourceTimestamp: a whole second an hour ago (printed after the
# port).
HISTORY_START = (datetime.now(timezone.utc) - timedelta(hours=1)).replace(microsecond=0)


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
    history = await line.add_variable(idx, "History", 0.0)
    level = ua.AccessLevel.CurrentRead.mask | ua.AccessLevel.HistoryRead.mask
    for a in (ua.AttributeIds.AccessLevel, ua.AttributeIds.UserAccessLevel):
        await history.write_attribute(a, ua.DataValue(ua.Variant(level, ua.VariantType.Byte)))
    await history.write_attribute(
        ua.AttributeIds.Historizing, ua.DataValue(ua.Variant(True, ua.VariantType.Boolean))
    )
    storage = HistoryDict(max_history_data_response_size=4)
    s.iserver.history_manager.set_storage(storage)
    await s.historize_node_data_change(history, period=timedelta(days=1))

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
    model_change = await s.get_event_generator(ua.ObjectIds.GeneralModelChangeEventType)
    # asyncua would make the Changes field a Variant of the structure's DataType NodeId.
    model_change.event.data_types["Changes"] = ua.VariantType.ExtensionObject

    @uamethod
    async def grow(parent, name):
        node = await line.add_variable(idx, name, 0.0)
        model_change.event.Changes = [
            ua.ModelChangeStructureDataType(
                Affected=node.nodeid, AffectedType=ua.NodeId(ua.ObjectIds.BaseDataVariableType), Verb=1
            )
        ]
        await model_change.trigger(message=f"added {name}")

    await line.add_method(idx, "Grow", grow, [ua.VariantType.String], [])
    async with s:
        for i in range(10):
            t = HISTORY_START + timedelta(seconds=i)
            await storage.save_node_value(
                history.nodeid,
                ua.DataValue(ua.Variant(float(i)), SourceTimestamp=t, ServerTimestamp=t),
            )
        print("listening", s.bserver.port, HISTORY_START.isoformat(), flush=True)
        n = 0.0
        while True:
            await asyncio.sleep(0.05)
            n += 1
            await counter.write_value(n)


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 0))
