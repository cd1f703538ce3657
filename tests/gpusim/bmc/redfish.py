"""The Redfish service of one simulated node's BMC: resources, authentication, actions.

`BmcService.handle(method, path, headers, body)` answers one request; it knows nothing of sockets
(gpusim.bmc.server carries the bytes). Every resource is built from the node's state on each request,
so that what Redfish says, what nvidia-smi prints (the same state) and what nvfwupd reports agree.

Implemented (DMTF Redfish, the subset NVIDIA's nvfwupd and community.general's redfish_info and
redfish_command use): the service root, SessionService (sessions with X-Auth-Token) and Basic
authentication (401 with WWW-Authenticate otherwise), Systems/System_0 with ComputerSystem.Reset,
Chassis (HGX_BMC_0, HGX_Chassis_0 with Chassis.Reset, one per GPU with its SKU, serial and UUID),
Managers with Manager.Reset, UpdateService (HttpPushUri, MultipartHttpPushUri,
HttpPushUriOptions.ForceUpdate, HttpPushUriTargets) with its FirmwareInventory, and TaskService.
Resets are carried out by the fleet supervisor (state.request_reboot): host restart, power off/on,
AC power cycle; a Manager.Reset makes this BMC stop answering for timing.bmc_reset seconds.

A GB200 / GB300 NVL72 compute tray (gpusim.firmware.is_tray) follows NVIDIA's GB300 compute flow files and
nvfwupd's GB200 target: Chassis/BMC_0 has the Oem action NvidiaChassis.AuxPowerReset (ResetType AuxPowerCycle), the
tray's AC power cycle that activates its staged firmware, after which the BMC does not answer for
timing.aux_power_cycle seconds (the flow files wait 180 s); UpdateService advertises
Oem.Nvidia.MultipartHttpPushUriOptions.UpdateOptionSupport [StageAndActivate, StageOnly] and a multipart update's
UpdateParameters may carry Oem.Nvidia.UpdateOption: StageOnly leaves the images staged for the next power cycle
(the tray serves meanwhile), StageAndActivate power-cycles the tray itself once the task completes.
"""

from __future__ import annotations

import base64
import binascii
import copy
import hashlib
import hmac
import json
import re
import secrets
import threading
import time
from pathlib import Path
from typing import Any

from .. import catalog, firmware, node, pldm
from .. import state as st
from . import updates

SERVICE_ROOT = "/redfish/v1"
JSON_LIMIT = 1 << 20  # bytes of a JSON request body
IMAGE_LIMIT = 64 << 20  # bytes of an uploaded firmware package
SESSION_LIMIT = 64
SESSION_IDLE_S = 1800
DEFAULT_BMC_RESET_S = 3.0
DEFAULT_AUX_POWER_CYCLE_S = 6.0  # the flow files wait 180 s; the simulated fleet's timing scales it
AUX_RESET_TYPES = ["AuxPowerCycle"]
UPDATE_OPTIONS = ["StageAndActivate", "StageOnly"]
AUX_POWER_RESET = "Actions/Oem/NvidiaChassis.AuxPowerReset"
SYSTEM_RESET_TYPES = ["On", "ForceOff", "GracefulShutdown", "GracefulRestart", "ForceRestart", "PowerCycle"]
MANAGER_RESET_TYPES = ["GracefulRestart", "ForceRestart"]
CHASSIS_RESET_TYPES = ["PowerCycle"]
PUBLIC = {"/redfish", SERVICE_ROOT}
POWER_STATE = {"up": "On", "rebooting": "PoweringOn", "down": "Off"}


class Response:
    def __init__(self, status: int, doc: Any = None, headers: dict[str, str] | None = None):
        self.status = status
        self.headers = dict(headers or {})
        self.body = b"" if doc is None else json.dumps(doc, indent=1).encode()


def error(status: int, message_id: str, text: str, headers: dict[str, str] | None = None) -> Response:
    """A Redfish error response (error + @Message.ExtendedInfo)."""
    info = updates.message(message_id, text, [], "Critical" if status >= 500 else "Warning")
    return Response(status, {"error": {"code": message_id, "message": text, "@Message.ExtendedInfo": [info]}}, headers)


def _link(uri: str) -> dict[str, str]:
    return {"@odata.id": uri}


def _collection(uri: str, odata_type: str, name: str, members: list[str]) -> dict[str, Any]:
    return {"@odata.id": uri, "@odata.type": odata_type, "Name": name, "Members@odata.count": len(members),
            "Members": [_link(m) for m in members]}


def _serial(seed: str, digits: int = 13) -> str:
    return str(int(hashlib.sha256(seed.encode()).hexdigest(), 16))[:digits]


class BmcService:
    """The Redfish service of the node in node_dir; user/password are its one account."""

    def __init__(self, name: str, node_dir: Path | str, user: str, password: str, log=None):
        self.name = name
        self.node_dir = Path(node_dir)
        self.user = user
        self._password = password.encode()
        self.sessions: dict[str, dict[str, Any]] = {}  # token -> {id, user, last}
        self.lock = threading.Lock()
        self.down_until = 0.0  # a Manager.Reset in progress
        self.log = log or (lambda _msg: None)
        self._cache: tuple[int, int, dict] | None = None
        # DSP0266 ExpandQuery this BMC advertises and honours on its firmware inventory, or None (the default: NVIDIA's
        # HMC documents no $expand; OpenBMC's bmcweb has it only when built with insecure-enable-redfish-query, and then
        # advertises {"ExpandAll": true, "Levels": true, "Links": true, "NoLinks": true, "MaxLevels": 6}).
        self.expand_query: dict[str, Any] | None = None

    # --- state -------------------------------------------------------------------------------

    def state(self) -> dict[str, Any]:
        """The node state, re-read only when state.json changed."""
        path = self.node_dir / st.STATE_FILE
        info = path.stat()
        key = (info.st_mtime_ns, info.st_size)
        cached = self._cache
        if cached is not None and cached[:2] == key:
            return cached[2]
        doc = st.load(self.node_dir)
        self._cache = (*key, doc)
        return doc

    def answering(self) -> bool:
        """False while the BMC resets or under the bmc_unresponsive fault: connections are left unanswered."""
        if time.monotonic() < self.down_until:
            return False
        try:
            return st.fault(self.state(), "bmc_unresponsive") is None
        except (OSError, ValueError):
            return False

    # --- authentication ----------------------------------------------------------------------

    def _authorized(self, headers: dict[str, str]) -> str | None:
        """The user of a valid X-Auth-Token or Basic credential, else None."""
        token = headers.get("x-auth-token")
        if token:
            with self.lock:
                self._expire_sessions()
                sess = self.sessions.get(token)
                if sess:
                    sess["last"] = time.monotonic()
                    return sess["user"]
            return None
        auth = headers.get("authorization", "")
        scheme, _, value = auth.partition(" ")
        if scheme.lower() != "basic":
            return None
        try:
            user, sep, password = base64.b64decode(value.strip(), validate=True).decode("utf-8").partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return None
        if sep and self._check(user, password):
            return user
        return None

    def _check(self, user: str, password: str) -> bool:
        ok_user = hmac.compare_digest(user.encode(), self.user.encode())
        ok_pass = hmac.compare_digest(password.encode(), self._password)
        return ok_user and ok_pass

    def _expire_sessions(self) -> None:
        now = time.monotonic()
        for token in [t for t, s in self.sessions.items() if now - s["last"] > SESSION_IDLE_S]:
            del self.sessions[token]

    # --- dispatch ----------------------------------------------------------------------------

    def handle(self, method: str, path: str, headers: dict[str, str], body: bytes) -> Response:
        """Answer one request; headers have lower-case names."""
        query = path.split("#", 1)[0].partition("?")[2]
        path = re.sub(r"/+", "/", path.split("?", 1)[0].split("#", 1)[0])
        if len(path) > 1:
            path = path.rstrip("/")
        try:
            if path not in PUBLIC and not (method == "POST" and path == f"{SERVICE_ROOT}/SessionService/Sessions"):
                if self._authorized(headers) is None:
                    return error(401, "Base.1.16.0.ResourceAtUriUnauthorized",
                                 f"While accessing the resource at {path}, the service received an authorization "
                                 "error: the credentials are missing or wrong.",
                                 {"WWW-Authenticate": 'Basic realm="Redfish"'})
            return self._route(method, path, headers, body, query)
        except _BadRequest as exc:
            return exc.response
        except (OSError, ValueError) as exc:  # the node's state unreadable: tell the client, keep serving
            self.log(f"{self.name}: {method} {path}: {exc}")
            return error(503, "Base.1.16.0.ServiceTemporarilyUnavailable",
                         f"The service is temporarily unavailable: {exc}", {"Retry-After": "5"})

    def _route(self, method: str, path: str, headers: dict[str, str], body: bytes, query: str = "") -> Response:
        routes = [
            (r"/redfish", {"GET": lambda m: Response(200, {"v1": "/redfish/v1/"})}),
            (SERVICE_ROOT, {"GET": lambda m: Response(200, self.service_root())}),
            (f"{SERVICE_ROOT}/SessionService", {"GET": lambda m: Response(200, self.session_service())}),
            (f"{SERVICE_ROOT}/SessionService/Sessions", {"GET": lambda m: Response(200, self.session_collection()),
                                                        "POST": lambda m: self.login(headers, body)}),
            (f"{SERVICE_ROOT}/SessionService/Sessions/([^/]+)", {"GET": lambda m: self.session(m.group(1)),
                                                                "DELETE": lambda m: self.logout(m.group(1))}),
            (f"{SERVICE_ROOT}/Systems", {"GET": lambda m: Response(200, _collection(
                f"{SERVICE_ROOT}/Systems", "#ComputerSystemCollection.ComputerSystemCollection", "Computer System "
                "Collection", [f"{SERVICE_ROOT}/Systems/System_0"]))}),
            (f"{SERVICE_ROOT}/Systems/System_0", {"GET": lambda m: Response(200, self.system())}),
            (f"{SERVICE_ROOT}/Systems/System_0/Actions/ComputerSystem.Reset",
             {"POST": lambda m: self.system_reset(self._json(headers, body))}),
            (f"{SERVICE_ROOT}/Chassis", {"GET": lambda m: Response(200, _collection(
                f"{SERVICE_ROOT}/Chassis", "#ChassisCollection.ChassisCollection", "Chassis Collection",
                [f"{SERVICE_ROOT}/Chassis/{c}" for c in self.chassis_ids()]))}),
            (f"{SERVICE_ROOT}/Chassis/([^/]+)", {"GET": lambda m: self.chassis(m.group(1))}),
            (f"{SERVICE_ROOT}/Chassis/([^/]+)/Actions/Chassis.Reset",
             {"POST": lambda m: self.chassis_reset(m.group(1), self._json(headers, body))}),
            (f"{SERVICE_ROOT}/Chassis/([^/]+)/{AUX_POWER_RESET}",
             {"POST": lambda m: self.aux_power_reset(m.group(1), self._json(headers, body))}),
            (f"{SERVICE_ROOT}/Managers", {"GET": lambda m: Response(200, _collection(
                f"{SERVICE_ROOT}/Managers", "#ManagerCollection.ManagerCollection", "Manager Collection",
                [f"{SERVICE_ROOT}/Managers/{i}" for i in self.manager_ids()]))}),
            (f"{SERVICE_ROOT}/Managers/([^/]+)", {"GET": lambda m: self.manager(m.group(1))}),
            (f"{SERVICE_ROOT}/Managers/([^/]+)/Actions/Manager.Reset",
             {"POST": lambda m: self.manager_reset(m.group(1), self._json(headers, body))}),
            (f"{SERVICE_ROOT}/UpdateService", {"GET": lambda m: Response(200, self.update_service()),
                                               "PATCH": lambda m: self.patch_update_service(self._json(headers, body)),
                                               "POST": lambda m: self.push(headers, body, multipart=False)}),
            (f"{SERVICE_ROOT}/UpdateService/update", {"POST": lambda m: self.push(headers, body, multipart=False)}),
            (f"{SERVICE_ROOT}/UpdateService/update-multipart",
             {"POST": lambda m: self.push(headers, body, multipart=True)}),
            (f"{SERVICE_ROOT}/UpdateService/FirmwareInventory", {"GET": lambda m: self.firmware_inventory(query)}),
            (f"{SERVICE_ROOT}/UpdateService/FirmwareInventory/([^/]+)", {"GET": lambda m: self.inventory_item(m.group(1))}),
            (f"{SERVICE_ROOT}/TaskService", {"GET": lambda m: Response(200, self.task_service())}),
            (f"{SERVICE_ROOT}/TaskService/Tasks", {"GET": lambda m: Response(200, _collection(
                f"{SERVICE_ROOT}/TaskService/Tasks", "#TaskCollection.TaskCollection", "Task Collection",
                [f"{SERVICE_ROOT}/TaskService/Tasks/{t}" for t in sorted(self.state()["gpu_firmware"]["tasks"], key=int)]))}),
            (f"{SERVICE_ROOT}/TaskService/Tasks/([^/]+)", {"GET": lambda m: self.task(m.group(1), monitor=False)}),
            (f"{SERVICE_ROOT}/TaskService/Tasks/([^/]+)/Monitor", {"GET": lambda m: self.task(m.group(1), monitor=True)}),
        ]
        for pattern, methods in routes:
            match = re.fullmatch(pattern, path)
            if match is None:
                continue
            if method not in methods:
                allowed = ", ".join(sorted(methods))
                return error(405, "Base.1.16.0.OperationNotAllowed",
                             f"The {method} method is not allowed on {path}; allowed: {allowed}.", {"Allow": allowed})
            return methods[method](match)
        return error(404, "Base.1.16.0.ResourceNotFound", f"The requested resource {path} was not found.")

    @staticmethod
    def _json(headers: dict[str, str], body: bytes) -> Any:
        if len(body) > JSON_LIMIT:
            raise _BadRequest(413, "Base.1.16.0.PayloadTooLarge", "The request body is too large.")
        try:
            return json.loads(body.decode("utf-8")) if body.strip() else {}
        except (UnicodeDecodeError, ValueError):
            raise _BadRequest(400, "Base.1.16.0.MalformedJSON",
                              "The request body submitted was malformed JSON and could not be parsed.") from None

    # --- resources -----------------------------------------------------------------------------

    def service_root(self) -> dict[str, Any]:
        return {
            "@odata.id": f"{SERVICE_ROOT}/", "@odata.type": "#ServiceRoot.v1_15_0.ServiceRoot", "Id": "RootService",
            "Name": "Root Service", "RedfishVersion": "1.17.0", "UUID": self._uuid("service"),
            "Vendor": "NVIDIA", "Product": f"gpusim BMC of {self.name}",
            "Systems": _link(f"{SERVICE_ROOT}/Systems"), "Chassis": _link(f"{SERVICE_ROOT}/Chassis"),
            "Managers": _link(f"{SERVICE_ROOT}/Managers"), "UpdateService": _link(f"{SERVICE_ROOT}/UpdateService"),
            "TaskService": _link(f"{SERVICE_ROOT}/TaskService"),
            "SessionService": _link(f"{SERVICE_ROOT}/SessionService"),
            "Links": {"Sessions": _link(f"{SERVICE_ROOT}/SessionService/Sessions")},
            **({"ProtocolFeaturesSupported": {"ExpandQuery": self.expand_query}} if self.expand_query else {}),
        }

    def _uuid(self, what: str) -> str:
        h = hashlib.sha256(f"{self.name}/{what}".encode()).hexdigest()
        return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"

    def session_service(self) -> dict[str, Any]:
        return {"@odata.id": f"{SERVICE_ROOT}/SessionService", "@odata.type": "#SessionService.v1_1_8.SessionService",
                "Id": "SessionService", "Name": "Session Service", "ServiceEnabled": True,
                "SessionTimeout": SESSION_IDLE_S, "Sessions": _link(f"{SERVICE_ROOT}/SessionService/Sessions")}

    def session_collection(self) -> dict[str, Any]:
        with self.lock:
            self._expire_sessions()
            ids = sorted(s["id"] for s in self.sessions.values())
        return _collection(f"{SERVICE_ROOT}/SessionService/Sessions", "#SessionCollection.SessionCollection",
                           "Session Collection", [f"{SERVICE_ROOT}/SessionService/Sessions/{i}" for i in ids])

    def _session_doc(self, sid: str, user: str) -> dict[str, Any]:
        return {"@odata.id": f"{SERVICE_ROOT}/SessionService/Sessions/{sid}", "@odata.type": "#Session.v1_5_0.Session",
                "Id": sid, "Name": "User Session", "UserName": user}

    def login(self, headers: dict[str, str], body: bytes) -> Response:
        doc = self._json(headers, body)
        user, password = (doc.get("UserName"), doc.get("Password")) if isinstance(doc, dict) else (None, None)
        if not isinstance(user, str) or not isinstance(password, str):
            return error(400, "Base.1.16.0.PropertyMissing", "The create session request needs UserName and Password.")
        if not self._check(user, password):
            self.log(f"{self.name}: session refused for user {user!r}")
            return error(401, "Base.1.16.0.ResourceAtUriUnauthorized",
                         f"While accessing the resource at {SERVICE_ROOT}/SessionService/Sessions, the service "
                         "received an authorization error: wrong user name or password.",
                         {"WWW-Authenticate": 'Basic realm="Redfish"'})
        with self.lock:
            self._expire_sessions()
            if len(self.sessions) >= SESSION_LIMIT:
                return error(503, "Base.1.16.0.SessionLimitExceeded",
                             "The session establishment failed due to the number of simultaneous sessions exceeding "
                             "the limit of the implementation.")
            token = secrets.token_hex(16)
            sid = secrets.token_hex(5)
            self.sessions[token] = {"id": sid, "user": user, "last": time.monotonic()}
        uri = f"{SERVICE_ROOT}/SessionService/Sessions/{sid}"
        return Response(201, self._session_doc(sid, user), {"X-Auth-Token": token, "Location": uri})

    def _session_token(self, sid: str) -> str | None:
        return next((t for t, s in self.sessions.items() if s["id"] == sid), None)

    def session(self, sid: str) -> Response:
        with self.lock:
            token = self._session_token(sid)
            if token is None:
                return error(404, "Base.1.16.0.ResourceNotFound", f"The session {sid} was not found.")
            return Response(200, self._session_doc(sid, self.sessions[token]["user"]))

    def logout(self, sid: str) -> Response:
        with self.lock:
            token = self._session_token(sid)
            if token is None:
                return error(404, "Base.1.16.0.ResourceNotFound", f"The session {sid} was not found.")
            del self.sessions[token]
        return Response(204)

    def _model(self, s: dict[str, Any]) -> str:
        short = s["gpu_model"].removeprefix("NVIDIA ")
        if firmware.is_tray(s):
            return f"NVIDIA {short} NVL compute tray"
        return f"NVIDIA HGX {short} {len(s['gpus'])}-GPU" if firmware.is_hgx(s) else f"GPU server with {len(s['gpus'])}x {short}"

    def system(self) -> dict[str, Any]:
        s = self.state()
        uri = f"{SERVICE_ROOT}/Systems/System_0"
        power = POWER_STATE.get(node.power(self.node_dir), "Off")
        return {
            "@odata.id": uri, "@odata.type": "#ComputerSystem.v1_20_0.ComputerSystem", "Id": "System_0",
            "Name": s["name"], "HostName": s["name"], "SystemType": "Physical", "Manufacturer": "NVIDIA",
            "Model": self._model(s), "SerialNumber": _serial(f"{self.name}/system"), "UUID": self._uuid("system"),
            "PowerState": power, "BiosVersion": s["gpu_firmware"]["components"][firmware.HOST_BIOS_ID]["version"],
            "Status": {"State": "Enabled" if power == "On" else "StandbyOffline", "Health": "OK"},
            "Actions": {"#ComputerSystem.Reset": {
                "target": f"{uri}/Actions/ComputerSystem.Reset",
                "ResetType@Redfish.AllowableValues": SYSTEM_RESET_TYPES}},
            "Links": {"Chassis": [_link(f"{SERVICE_ROOT}/Chassis/{self.chassis_ids()[0]}")],
                      "ManagedBy": [_link(f"{SERVICE_ROOT}/Managers/BMC_0")]},
        }

    def chassis_ids(self) -> list[str]:
        s = self.state()
        if firmware.is_tray(s):
            return ["BMC_0", "HGX_Chassis_0"] + [firmware.gpu_chassis_id(s, g["index"]) for g in s["gpus"] if g["present"]]
        if not firmware.is_hgx(s):
            return ["Chassis_0", "BMC_0"] + [firmware.gpu_chassis_id(s, g["index"]) for g in s["gpus"] if g["present"]]
        return ["HGX_BMC_0", "HGX_Chassis_0"] + [firmware.gpu_chassis_id(s, g["index"]) for g in s["gpus"] if g["present"]]

    def chassis(self, cid: str) -> Response:
        s = self.state()
        if cid not in self.chassis_ids():
            return error(404, "Base.1.16.0.ResourceNotFound", f"The chassis {cid} was not found.")
        uri = f"{SERVICE_ROOT}/Chassis/{cid}"
        doc: dict[str, Any] = {"@odata.id": uri, "@odata.type": "#Chassis.v1_23_0.Chassis", "Id": cid, "Name": cid,
                               "Manufacturer": "NVIDIA", "Status": {"State": "Enabled", "Health": "OK"}}
        gpu = next((g for g in s["gpus"] if firmware.gpu_chassis_id(s, g["index"]) == cid), None)
        if gpu is not None:
            model = catalog.gpu_model(s["gpu_model"])
            doc.update(ChassisType="Module", Model=s["gpu_model"], PartNumber=model.board_part,
                       SerialNumber=gpu["serial"], UUID=gpu["uuid"].removeprefix("GPU-"),
                       SKU="0x" + firmware.gpu_sku(s["gpu_model"]))
        elif cid in ("HGX_BMC_0", "BMC_0"):
            doc.update(ChassisType="Module", Model=self._model(s), PartNumber="965-24387-0002-000",
                       SerialNumber=_serial(f"{self.name}/{cid}"))
            if cid == "BMC_0" and firmware.is_tray(s):
                doc["Actions"] = {"Oem": {"#NvidiaChassis.AuxPowerReset": {
                    "target": f"{uri}/{AUX_POWER_RESET}", "ResetType@Redfish.AllowableValues": AUX_RESET_TYPES}}}
        else:
            doc.update(ChassisType="RackMount" if cid == "Chassis_0" else "Component", Model=self._model(s),
                       SerialNumber=_serial(f"{self.name}/{cid}"), PowerState=POWER_STATE.get(node.power(self.node_dir)))
            if cid == "HGX_Chassis_0" and not firmware.is_tray(s):
                doc["Actions"] = {"#Chassis.Reset": {"target": f"{uri}/Actions/Chassis.Reset",
                                                     "ResetType@Redfish.AllowableValues": CHASSIS_RESET_TYPES}}
        return Response(200, doc)

    def manager_ids(self) -> list[str]:
        s = self.state()
        return ["BMC_0", "HGX_BMC_0"] if firmware.is_hgx(s) or firmware.is_tray(s) else ["BMC_0"]

    def manager(self, mid: str) -> Response:
        s = self.state()
        if mid not in self.manager_ids():
            return error(404, "Base.1.16.0.ResourceNotFound", f"The manager {mid} was not found.")
        uri = f"{SERVICE_ROOT}/Managers/{mid}"
        version = s["gpu_firmware"]["components"]["HGX_FW_BMC_0" if mid == "HGX_BMC_0" else firmware.HOST_BMC_ID]["version"]
        return Response(200, {
            "@odata.id": uri, "@odata.type": "#Manager.v1_19_0.Manager", "Id": mid, "Name": mid,
            "ManagerType": "BMC", "FirmwareVersion": version, "UUID": self._uuid(mid), "PowerState": "On",
            "Status": {"State": "Enabled", "Health": "OK"},
            "Actions": {"#Manager.Reset": {"target": f"{uri}/Actions/Manager.Reset",
                                           "ResetType@Redfish.AllowableValues": MANAGER_RESET_TYPES}},
        })

    def firmware_inventory(self, query: str) -> Response:
        """The FirmwareInventory collection; its members expanded for $expand=. or * (with or without ($levels=1))
        when expand_query advertises it (a query it does not advertise is ignored, as without the feature)."""
        uri = f"{SERVICE_ROOT}/UpdateService/FirmwareInventory"
        s = self.state()
        rows = firmware.inventory(s)
        doc = _collection(uri, "#SoftwareInventoryCollection.SoftwareInventoryCollection", "Firmware Inventory Collection",
                          [f"{uri}/{r['id']}" for r in rows])
        expand = next((v for k, v in (p.partition("=")[::2] for p in query.split("&")) if k == "$expand"), None)
        advertised = self.expand_query
        if expand is not None and advertised:
            which, _, levels = expand.partition("(")
            if levels not in ("", "$levels=1)") or (levels and not advertised.get("Levels")):
                return error(400, "Base.1.16.0.QueryParameterValueFormatError",
                             f"The value {expand} for the query parameter $expand is of a different format than the parameter can accept.")
            if (which == "." and advertised.get("NoLinks")) or (which in ("*", "~") and advertised.get("ExpandAll")):
                doc["Members"] = [self._inventory_doc(s, r) for r in rows]
        return Response(200, doc)

    def inventory_item(self, cid: str) -> Response:
        s = self.state()
        row = firmware.find(s, cid)
        if row is None:
            return error(404, "Base.1.16.0.ResourceNotFound", f"The firmware inventory item {cid} was not found.")
        return Response(200, self._inventory_doc(s, row))

    def _inventory_doc(self, s: dict[str, Any], row: dict[str, Any]) -> dict[str, Any]:
        cid = row["id"]
        doc: dict[str, Any] = {
            "@odata.id": f"{SERVICE_ROOT}/UpdateService/FirmwareInventory/{cid}",
            "@odata.type": "#SoftwareInventory.v1_9_0.SoftwareInventory", "Id": cid, "Name": f"{cid} firmware",
            "Version": row["version"], "Updateable": row["updateable"], "Manufacturer": "NVIDIA",
            "SoftwareId": row["record"], "Status": {"State": "Enabled", "Health": "OK"},
            "Oem": {"Nvidia": {"@odata.type": "#NvidiaSoftwareInventory.v1_0_0.NvidiaSoftwareInventory",
                               "InactiveFirmwareSlot": {"Version": row["staged"] or row["version"],
                                                        "FirmwareState": "Staged" if row["staged"] else "Active"}}},
        }
        if cid == firmware.HOST_BMC_ID:
            doc.update(Name="Host BMC firmware", RelatedItem=[_link(f"{SERVICE_ROOT}/Managers/BMC_0")])
        elif cid == firmware.HOST_BIOS_ID:
            doc.update(Name="Host BIOS", RelatedItem=[_link(f"{SERVICE_ROOT}/Systems/System_0")])
        elif row["gpu"] is not None:
            doc["RelatedItem"] = [_link(f"{SERVICE_ROOT}/Chassis/{firmware.gpu_chassis_id(s, row['gpu'])}")]
        elif firmware.is_hgx(s) or firmware.is_tray(s):
            doc["RelatedItem"] = [_link(f"{SERVICE_ROOT}/Chassis/HGX_Chassis_0")]
        return doc

    def update_service(self) -> dict[str, Any]:
        fw = self.state()["gpu_firmware"]
        uri = f"{SERVICE_ROOT}/UpdateService"
        doc = {
            "@odata.id": uri, "@odata.type": "#UpdateService.v1_11_0.UpdateService", "Id": "UpdateService",
            "Name": "Update Service", "ServiceEnabled": True, "Status": {"State": "Enabled", "Health": "OK"},
            "HttpPushUri": f"{uri}/update", "MultipartHttpPushUri": f"{uri}/update-multipart",
            "HttpPushUriOptions": {"ForceUpdate": bool(fw.get("force_update"))},
            "HttpPushUriTargets": list(fw.get("push_targets") or []),
            "MaxImageSizeBytes": IMAGE_LIMIT,
            "FirmwareInventory": _link(f"{uri}/FirmwareInventory"),
        }
        if fw.get("tray"):
            doc["Oem"] = {"Nvidia": {"MultipartHttpPushUriOptions": {"UpdateOptionSupport": list(UPDATE_OPTIONS)}}}
        return doc

    def patch_update_service(self, doc: Any) -> Response:
        if not isinstance(doc, dict) or not doc:
            return error(400, "Base.1.16.0.MalformedJSON", "PATCH UpdateService needs a JSON object of properties.")
        changes: dict[str, Any] = {}
        for key, value in doc.items():
            if key == "HttpPushUriOptions" and isinstance(value, dict) and set(value) <= {"ForceUpdate"}:
                if "ForceUpdate" in value:
                    if not isinstance(value["ForceUpdate"], bool):
                        return error(400, "Base.1.16.0.PropertyValueTypeError",
                                     f"The value {value['ForceUpdate']!r} for HttpPushUriOptions/ForceUpdate is not a boolean.")
                    changes["force_update"] = value["ForceUpdate"]
            elif key == "HttpPushUriTargetsBusy" and isinstance(value, bool):
                pass  # a client's lock flag on the targets; nothing else shares this BMC's targets
            elif key == "HttpPushUriTargets" and isinstance(value, list) and all(isinstance(v, str) for v in value):
                known = {r["id"] for r in firmware.inventory(self.state()) if r["updateable"]} | {"HGX_Chassis_0"}
                bad = [v for v in value if v.rstrip("/").rsplit("/", 1)[-1] not in known]
                if bad:
                    return error(400, "Base.1.16.0.PropertyValueNotInList",
                                 f"The value {bad[0]!r} for HttpPushUriTargets is not an updatable firmware inventory URI.")
                changes["push_targets"] = list(value)
            else:
                return error(400, "Base.1.16.0.PropertyUnknown" if key not in ("HttpPushUriOptions", "HttpPushUriTargets",
                                                                             "HttpPushUriTargetsBusy")
                             else "Base.1.16.0.PropertyValueTypeError",
                             f"The property {key} with value {json.dumps(value)[:80]} cannot be set on UpdateService.")
        st.update(self.node_dir, lambda s: s["gpu_firmware"].update(changes))
        return Response(204)

    def task_service(self) -> dict[str, Any]:
        return {"@odata.id": f"{SERVICE_ROOT}/TaskService", "@odata.type": "#TaskService.v1_2_0.TaskService",
                "Id": "TaskService", "Name": "Task Service", "ServiceEnabled": True,
                "CompletedTaskOverWritePolicy": "Oldest", "LifeCycleEventOnTaskStateChange": True,
                "Status": {"State": "Enabled", "Health": "OK"}, "Tasks": _link(f"{SERVICE_ROOT}/TaskService/Tasks")}

    def task(self, tid: str, monitor: bool) -> Response:
        task = self.state()["gpu_firmware"]["tasks"].get(tid)
        if task is None:
            return error(404, "Base.1.16.0.ResourceNotFound", f"The task {tid} was not found.")
        doc = updates.task_resource(task)
        if monitor and task["state"] == "Running":
            return Response(202, doc, {"Location": f"{SERVICE_ROOT}/TaskService/Tasks/{tid}/Monitor", "Retry-After": "1"})
        return Response(200, doc)

    # --- actions -------------------------------------------------------------------------------

    @staticmethod
    def _reset_type(doc: Any, allowed: list[str]) -> str | Response:
        if not isinstance(doc, dict) or "ResetType" not in doc:
            return error(400, "Base.1.16.0.ActionParameterMissing", "The action requires the parameter ResetType.")
        value = doc["ResetType"]
        if value not in allowed:
            return error(400, "Base.1.16.0.ActionParameterValueNotInList",
                         f"The value {json.dumps(value)} for the parameter ResetType is not allowed; allowed: "
                         f"{', '.join(allowed)}.")
        return value

    def system_reset(self, doc: Any) -> Response:
        reset = self._reset_type(doc, SYSTEM_RESET_TYPES)
        if isinstance(reset, Response):
            return reset
        power = node.power(self.node_dir)
        if reset in ("ForceOff", "GracefulShutdown"):
            if power != "down":
                st.request_reboot(self.node_dir, 0, "poweroff")
        elif power == "down":
            st.request_reboot(self.node_dir, 0, "on")
        elif reset != "On":
            st.request_reboot(self.node_dir, 0, "powercycle" if reset == "PowerCycle" else "reboot")
        self.log(f"{self.name}: ComputerSystem.Reset {reset} (power was {power})")
        return Response(204)

    def chassis_reset(self, cid: str, doc: Any) -> Response:
        if cid != "HGX_Chassis_0" or cid not in self.chassis_ids() or firmware.is_tray(self.state()):
            return error(404, "Base.1.16.0.ResourceNotFound", f"The chassis {cid} has no Reset action.")
        reset = self._reset_type(doc, CHASSIS_RESET_TYPES)
        if isinstance(reset, Response):
            return reset
        st.request_reboot(self.node_dir, 0, "powercycle")
        self.log(f"{self.name}: Chassis.Reset {reset} of {cid}: AC power cycle")
        return Response(204)

    def aux_power_reset(self, cid: str, doc: Any) -> Response:
        """The tray's AC power cycle (NvidiaChassis.AuxPowerReset on BMC_0): the host loses power and boots again with
        every staged image active, and the BMC itself is gone for timing.aux_power_cycle seconds."""
        if cid != "BMC_0" or not firmware.is_tray(self.state()):
            return error(404, "Base.1.16.0.ResourceNotFound", f"The chassis {cid} has no AuxPowerReset action.")
        reset = self._reset_type(doc, AUX_RESET_TYPES)
        if isinstance(reset, Response):
            return reset
        self._aux_power_cycle("AuxPowerReset")
        return Response(204)

    def _aux_power_cycle(self, why: str) -> None:
        st.request_reboot(self.node_dir, 0, "powercycle")
        seconds = float(self.state()["timing"].get("aux_power_cycle", DEFAULT_AUX_POWER_CYCLE_S) or 0)
        with self.lock:
            self.sessions.clear()  # the BMC loses power too: every session ends
        self.down_until = time.monotonic() + seconds
        self.log(f"{self.name}: {why} AuxPowerCycle: the tray power-cycles; not answering for {seconds:g}s")

    def manager_reset(self, mid: str, doc: Any) -> Response:
        if mid not in self.manager_ids():
            return error(404, "Base.1.16.0.ResourceNotFound", f"The manager {mid} was not found.")
        reset = self._reset_type(doc, MANAGER_RESET_TYPES)
        if isinstance(reset, Response):
            return reset
        kind = "bmc_reset" if mid == "HGX_BMC_0" else "host_bmc_reset"
        activated = st.update(self.node_dir, lambda s: firmware.activate(s, kind))
        seconds = float(self.state()["timing"].get("bmc_reset", DEFAULT_BMC_RESET_S) or 0)
        with self.lock:
            self.sessions.clear()  # a BMC reboot ends every session
        self.down_until = time.monotonic() + seconds
        self.log(f"{self.name}: Manager.Reset {reset} of {mid}; activated {activated or 'nothing'}; "
                 f"not answering for {seconds:g}s")
        return Response(204)

    def push(self, headers: dict[str, str], body: bytes, multipart: bool) -> Response:
        """An HTTP push (octet-stream) or multipart firmware update: a task, 202 Accepted."""
        if len(body) > IMAGE_LIMIT:
            return error(413, "Base.1.16.0.PayloadTooLarge", f"The image is larger than {IMAGE_LIMIT} bytes.")
        params: dict[str, Any] = {}
        image_name = "image.fwpkg"
        if multipart:
            parts = _multipart(headers.get("content-type", ""), body)
            if parts is None or "UpdateFile" not in parts:
                return error(400, "Base.1.16.0.ActionParameterMissing",
                             "The multipart update needs an UpdateFile part (and optionally UpdateParameters).")
            if "UpdateParameters" in parts:
                params = self._json(headers, parts["UpdateParameters"][1])
                if not isinstance(params, dict):
                    return error(400, "Base.1.16.0.MalformedJSON", "UpdateParameters must be a JSON object.")
            image_name, body = parts["UpdateFile"][0] or image_name, parts["UpdateFile"][1]
        try:
            package = pldm.parse(body)
        except pldm.PldmError as exc:
            return error(400, "Base.1.16.0.ActionParameterValueFormatError",
                         f"The uploaded image is not a valid PLDM firmware package: {exc}")
        targets = params.get("Targets")
        if targets is not None and (not isinstance(targets, list) or not all(isinstance(t, str) for t in targets)):
            return error(400, "Base.1.16.0.PropertyValueTypeError", "UpdateParameters Targets must be a list of URIs.")
        option = (params.get("Oem") or {}).get("Nvidia", {}).get("UpdateOption") if isinstance(params.get("Oem"), dict) else None
        if option is not None and (not firmware.is_tray(self.state()) or option not in UPDATE_OPTIONS):
            return error(400, "Base.1.16.0.PropertyValueNotInList",
                         f"The value {json.dumps(option)[:80]} for UpdateParameters Oem/Nvidia/UpdateOption is not "
                         f"supported by this system; supported: {', '.join(UPDATE_OPTIONS) if firmware.is_tray(self.state()) else 'none'}.")
        force_param = params.get("ForceUpdate")  # NVIDIA's UpdateParameters option: this update only
        if force_param is not None and not isinstance(force_param, bool):
            return error(400, "Base.1.16.0.PropertyValueTypeError", "UpdateParameters ForceUpdate must be a boolean.")
        uri = f"{SERVICE_ROOT}/UpdateService/update-multipart" if multipart else f"{SERVICE_ROOT}/UpdateService"

        def start(s: dict[str, Any]) -> dict[str, Any] | updates.UpdateError:
            if any(t["state"] == "Running" for t in s["gpu_firmware"]["tasks"].values()):
                return updates.UpdateError(503, "Base.1.16.0.ServiceTemporarilyUnavailable",
                                           "A firmware update is already in progress; retry when its task has ended.")
            try:
                force = bool(s["gpu_firmware"].get("force_update")) if force_param is None else force_param
                work, skipped = updates.plan(s, package, image_name, targets if multipart else
                                             s["gpu_firmware"].get("push_targets"), force)
            except updates.UpdateError as exc:
                return exc
            task = updates.create(s, package, image_name, work, skipped, uri, activate=option == "StageAndActivate", option=option)
            updates.advance(s, task["id"])
            return task

        result = st.update(self.node_dir, start)
        if isinstance(result, updates.UpdateError):
            return error(result.status, result.message_id, str(result),
                         {"Retry-After": "10"} if result.status == 503 else None)
        self.log(f"{self.name}: update task {result['id']}: package {package.version} sha256 {package.sha256}, "
                 f"{len(result['work'])} components")
        tid = result["id"]
        return Response(202, updates.task_resource(result),
                        {"Location": f"{SERVICE_ROOT}/TaskService/Tasks/{tid}/Monitor"})

    def running_tasks(self) -> list[str]:
        try:
            return [t for t, task in self.state()["gpu_firmware"]["tasks"].items() if task["state"] == "Running"]
        except (OSError, ValueError, KeyError):
            return []

    def advance_tasks(self) -> None:
        """Move this node's running tasks on (called by the server's ticker); the state is written only when
        a task has something to record (a component flashed, the end), not at every tick."""
        for tid in self.running_tasks():
            if updates.advance(copy.deepcopy(self.state()), tid):
                st.update(self.node_dir, lambda s, tid=tid: updates.advance(s, tid))
                task = self.state()["gpu_firmware"]["tasks"].get(tid) or {}
                if task.get("activate") and task.get("state") == "Completed":
                    st.update(self.node_dir, lambda s, tid=tid: s["gpu_firmware"]["tasks"][tid].update(activate=False))
                    self._aux_power_cycle(f"task {tid} StageAndActivate:")


class _BadRequest(Exception):
    def __init__(self, status: int, message_id: str, text: str):
        super().__init__(text)
        self.response = error(status, message_id, text)


_BOUNDARY = re.compile(r'multipart/form-data\s*;.*?boundary="?([0-9A-Za-z\'()+_,./:=?-]{1,70})"?\s*(;.*)?', re.I)
_DISPOSITION = re.compile(rb'form-data\s*;\s*name="([^"]*)"(?:\s*;\s*filename="([^"]*)")?', re.I)


def _multipart(content_type: str, body: bytes) -> dict[str, tuple[str | None, bytes]] | None:
    """{part name: (file name, bytes)} of a multipart/form-data body, or None when it is not one (one pass)."""
    match = _BOUNDARY.fullmatch(content_type.strip())
    if match is None:
        return None
    delimiter = b"--" + match.group(1).encode("ascii")
    chunks = body.split(delimiter)
    if len(chunks) < 3 or not chunks[-1].startswith(b"--"):
        return None
    parts: dict[str, tuple[str | None, bytes]] = {}
    for chunk in chunks[1:-1]:
        head, sep, payload = chunk.removeprefix(b"\r\n").partition(b"\r\n\r\n")
        if not sep:
            return None
        name = filename = None
        for line in head.split(b"\r\n"):
            key, _, value = line.partition(b":")
            if key.strip().lower() == b"content-disposition":
                disp = _DISPOSITION.search(value)
                if disp:
                    name = disp.group(1).decode("utf-8", "replace")
                    filename = disp.group(2).decode("utf-8", "replace") if disp.group(2) is not None else None
        if name:
            parts[name] = (filename, payload.removesuffix(b"\r\n"))
    return parts
