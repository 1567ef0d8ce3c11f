"""Managers: objects served by a manager process, reached through proxies.

``BaseManager`` and ``SyncManager`` are multiprocessing's, with the server a job;
``AsyncManager`` is fiber's: each registered object lives in a job of its own (by
default) and every method call returns a ``CallHandle`` at once.
"""

# Inside: _managers: BaseManager, SyncManager, AsyncManager and the types they register.
# _server: the manager's object server (a service on the manager job's hub). _proxies: the
# proxies (sync and async) and the proxy types of SyncManager. _async_calls: the calls of
# async proxies, in flight on one channel each.

from .._exports import publish
from ..errors import RemoteError
from ._async_calls import CallHandle
from ._managers import AsyncManager, BaseManager, Namespace, SyncManager, Token
from ._proxies import (
    AcquirerProxy,
    ArrayProxy,
    AsyncAutoProxy,
    AsyncProxy,
    AsyncResultProxy,
    AutoProxy,
    BarrierProxy,
    BaseListProxy,
    BasePoolProxy,
    BaseProxy,
    ConditionProxy,
    DictProxy,
    DirectProxy,
    EventProxy,
    IteratorProxy,
    ListProxy,
    MakeProxyType,
    NamespaceProxy,
    PoolProxy,
    QueueProxy,
    ValueProxy,
)

__all__ = ["BaseManager", "SyncManager", "AsyncManager", "BaseProxy", "AsyncProxy",
           "AutoProxy", "AsyncAutoProxy", "MakeProxyType", "Namespace", "Token",
           "CallHandle", "DictProxy", "ListProxy", "ValueProxy", "ArrayProxy",
           "NamespaceProxy", "IteratorProxy", "AcquirerProxy", "ConditionProxy",
           "EventProxy", "BarrierProxy", "QueueProxy", "PoolProxy", "BasePoolProxy",
           "AsyncResultProxy", "DirectProxy", "BaseListProxy", "RemoteError"]

publish(__name__, BaseManager, SyncManager, AsyncManager, BaseProxy, AsyncProxy, AutoProxy,
        AsyncAutoProxy, CallHandle, DictProxy, ListProxy, ValueProxy, ArrayProxy,
        NamespaceProxy, IteratorProxy, AcquirerProxy, ConditionProxy, EventProxy, BarrierProxy,
        QueueProxy, PoolProxy, BasePoolProxy, AsyncResultProxy, DirectProxy, BaseListProxy)
