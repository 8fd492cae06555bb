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
  values per answer (the rest behind a continuation point);
- Journal: an Object whose events are historized (Server.historize_node_event, the same
  store: at most 4 events per answer); its method Log(String, UInt16) raises a
  BaseEventType event from it with that message and severity. Event reads apply the
  filter's where clause (asyncua's own WhereClauseEvaluator, which its subscriptions use;
  its history store alone ignores where clauses);
- Ledger: an Object whose EventNotifier says HistoryRead but whose events are kept nowhere:
  an event read of it is answered BadDataUnavailable (a ServiceFault).
"""
import asyncio
import logging
import sys
from datetime import datetime, timedelta, timezone

from asyncua import Server, ua, uamethod
from asyncua.server.history import HistoryDict
from asyncua.server.monitored_item_service import WhereClauseEvaluator

# The first historized value's SourceTimestamp: a whole second an hour ago (printed after the
# port).
HISTORY_START = (datetime.now(timezone.utc) - timedelta(hours=1)).replace(microsecond=0)


class Storage(HistoryDict):
    """asyncua's in-memory store, keeping each event under its SourceNode: the events its
    history subscription hands over are rebuilt from their fields, and so name the Server
    object as the node they came from whatever node raised them (asyncua 2.1)."""

    def __init__(self, aspace, **kw):
        super().__init__(**kw)
        self.aspace = aspace

    async def save_event(self, event):
        event.emitting_node = event.SourceNode
        await super().save_event(event)

    async def read_event_history(self, source_id, start, end, nb_values, evfilter):
        if source_id not in self._events:
            raise ua.UaStatusCodeError(ua.StatusCodes.BadDataUnavailable)
        # The events the where clause accepts, then the store's own paging over them.
        where = WhereClauseEvaluator(logging.getLogger("where"), self.aspace, evfilter.WhereClause)
        kept = self._events[source_id]
        self._events[source_id] = type(kept)(e for e in kept if where.eval(e))
        try:
            return await super().read_event_history(source_id, start, end, nb_values, evfilter)
        finally:
            self._events[source_id] = kept


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
    storage = Storage(s.iserver.aspace, max_history_data_response_size=4)
    s.iserver.history_manager.set_storage(storage)
    await s.historize_node_data_change(history, period=timedelta(days=1))
    ledger = await line.add_object(idx, "Ledger")
    notifier = ua.EventNotifier.SubscribeToEvents.mask | ua.EventNotifier.HistoryRead.mask
    await ledger.write_attribute(
        ua.AttributeIds.EventNotifier,
        ua.DataValue(ua.Variant(notifier, ua.VariantType.Byte)),
    )
    journal = await line.add_object(idx, "Journal")
    # The generator makes Journal an event notifier (and says it GeneratesEvent
    # BaseEventType) before its events are historized (HistoryRead in its EventNotifier).
    journal_events = await s.get_event_generator(ua.ObjectIds.BaseEventType, journal)
    await s.historize_node_event(journal, period=timedelta(days=1))

    @uamethod
    async def log(parent, message, severity):
        journal_events.event.Severity = severity
        await journal_events.trigger(message=message)

    await journal.add_method(
        idx, "Log", log, [ua.VariantType.String, ua.VariantType.UInt16], []
    )

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
