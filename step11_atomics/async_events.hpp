// The device's asynchronous events: what each one means, and whether it ends a connection.
#pragma once

#include <infiniband/verbs.h>

#include <string>

namespace tutorial {

//! [async_events]
/// One line for an event from ibv_get_async_event(): libibverbs' name for it, what it affects,
/// and what it means for the program. The events that end a connection are fatal_for_qp().
[[nodiscard]] inline std::string async_event_text(const ibv_async_event& event) {
    std::string text = ibv_event_type_str(event.event_type);
    switch (event.event_type) {
        case IBV_EVENT_PORT_ERR:
            return text + " on port " + std::to_string(event.element.port_num) +
                   ": the link is down; its connections' sends fail once their retries run out";
        case IBV_EVENT_PORT_ACTIVE:
            return text + " on port " + std::to_string(event.element.port_num) + ": the link is up";
        case IBV_EVENT_GID_CHANGE:
        case IBV_EVENT_LID_CHANGE:
            return text + " on port " + std::to_string(event.element.port_num) +
                   ": new connections must exchange the new address";
        case IBV_EVENT_QP_FATAL:
        case IBV_EVENT_QP_REQ_ERR:
        case IBV_EVENT_QP_ACCESS_ERR: return text + ": the QP is in the error state";
        case IBV_EVENT_CQ_ERR:
            return text + ": the shared CQ overflowed; every connection on it is lost";
        case IBV_EVENT_SRQ_ERR:
            return text + ": the shared receive queue failed; every connection on it is lost";
        case IBV_EVENT_SRQ_LIMIT_REACHED:
            return text + ": fewer receives posted than the limit; refill, then re-arm";
        case IBV_EVENT_QP_LAST_WQE_REACHED:
            return text + ": the QP in error will take no more receives from the SRQ";
        case IBV_EVENT_DEVICE_FATAL:
            return text + ": the device failed; every resource on it must be destroyed";
        default: return text;
    }
}

/// True for the events after which the QP cannot go on.
[[nodiscard]] inline bool fatal_for_qp(ibv_event_type type) {
    return type == IBV_EVENT_QP_FATAL || type == IBV_EVENT_QP_REQ_ERR ||
           type == IBV_EVENT_QP_ACCESS_ERR;
}

/// True for the events after which no connection can go on: the CQ and the SRQ are shared.
[[nodiscard]] inline bool fatal_for_server(ibv_event_type type) {
    return type == IBV_EVENT_CQ_ERR || type == IBV_EVENT_SRQ_ERR || type == IBV_EVENT_DEVICE_FATAL;
}
//! [async_events]

}  // namespace tutorial
