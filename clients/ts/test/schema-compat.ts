// Compile-time proof that the hand-written wire types (src/types.ts) agree
// with the types generated from the server's OpenAPI document
// (test/generated/openapi.ts, made by `npm run gen:schema`). `npm test` runs
// tsc over this file; a disagreement is a type error naming the type and
// the field.
//
// Rules, per pair (Mine, Schema):
//   - the same property names, and the same ones required;
//   - each of my property types is assignable to the schema's (the client
//     never claims a shape the server does not send);
//   - where the schema lists values (an enum), mine accepts every one of them.
// Plain strings in the schema (e.g. a status the Go type does not enumerate)
// may be narrowed by mine; nested named types are checked as their own pair.
//
// Known, deliberate difference (passed as a skipped field below):
//   - Event.payload: typed per event type in the client, `{}` in the schema
//     (so EventPage.events, a list of events, is skipped too).
import type * as S from "./generated/openapi.js";
import type * as M from "../src/types.js";

// My state is readonly all the way down; the wire shape is the same data.
type Unro<T> = T extends readonly (infer E)[] ? Unro<E>[] : T extends object ? { -readonly [K in keyof T]: Unro<T[K]> } : T;
type RequiredKeys<T> = { [K in keyof T]-?: {} extends Pick<T, K> ? never : K }[keyof T];
type Eq<A, B> = [A] extends [B] ? ([B] extends [A] ? true : false) : false;
type IsLiteralUnion<T> = [T] extends [string] ? (string extends T ? false : true) : false;

type PropOK<Mine, Schema> = [Unro<Exclude<Mine, undefined>>] extends [Exclude<Schema, undefined>]
  ? IsLiteralUnion<Exclude<Schema, undefined>> extends true
    ? [Exclude<Schema, undefined>] extends [Exclude<Mine, undefined>]
      ? true
      : "enum value missing"
    : true
  : "not assignable to the schema";

type Problems<Mine, Schema, Skip extends string = never> = {
  [K in Exclude<keyof Mine | keyof Schema, Skip>]: K extends keyof Mine
    ? K extends keyof Schema
      ? PropOK<Mine[K], Schema[K]>
      : "only in the client"
    : "only in the schema";
};
type Bad<P> = { [K in keyof P as P[K] extends true ? never : K]: P[K] };

/** `true` when Mine and Schema agree, else an object naming each bad field. */
type Agree<Mine, Schema, Skip extends string = never> =
  Eq<Exclude<RequiredKeys<Mine>, Skip>, Exclude<RequiredKeys<Schema>, Skip>> extends true
    ? {} extends Bad<Problems<Mine, Schema, Skip>>
      ? true
      : Bad<Problems<Mine, Schema, Skip>>
    : { requiredMine: Exclude<RequiredKeys<Mine>, Skip>; requiredSchema: Exclude<RequiredKeys<Schema>, Skip> };

function check<T extends true>(): T | void {}

// Events: the envelope (payload is typed per event type in the client, `{}` in the schema).
check<Agree<M.AgentEvent, S.Event, "payload">>();
check<Eq<M.EventType, S.Event["type"]>>();
check<Agree<M.EventContext, S.Context>>();
check<Agree<M.AnyBlock, S.Block>>();
check<Eq<M.BlockType, S.Block["type"]>>();
check<Agree<M.BlockUpsertPayload, S.BlockUpsert>>();
check<Agree<M.BlockDeltaPayload, S.BlockDelta>>();
check<Agree<M.MetadataUpdatePayload, S.MetadataUpdate>>();
check<Agree<M.StatusPayload, S.StatusChange>>();
check<Agree<M.QueryStartedPayload, S.QueryStarted>>();
check<Agree<M.QueryCompletedPayload, S.QueryCompleted>>();
check<Agree<M.QueryFailedPayload, S.QueryFailed>>();
check<Agree<M.PermissionRequestedPayload, S.PermissionRequested>>();
check<Agree<M.PermissionResolvedPayload, S.PermissionResolved>>();
check<Agree<M.FileChangePayload, S.FileChange>>();
check<Agree<M.SubagentSpawnedPayload, S.SubagentSpawned>>();
check<Agree<M.SubagentCompletedPayload, S.SubagentCompleted>>();
check<Agree<M.ErrorPayload, S.ErrorEvent>>();
check<Agree<M.LogPayload, S.LogEvent>>();
check<Agree<M.SessionIdlePayload, S.SessionIdleEvent>>();
check<Agree<M.OptionsUpdatePayload, S.OptionsUpdate>>();

// Reduced state and its parts.
check<Agree<M.Runtime, S.Runtime>>();
check<Agree<M.Usage, S.Usage>>();
check<Agree<M.Subagent, S.Subagent>>();
check<Agree<M.WorkspaceFile, S.WorkspaceFile>>();
check<Agree<M.Turn, S.Turn>>();
check<Agree<M.ReducedState, S.ConversationState>>();

// REST shapes.
check<Agree<M.SessionState, S.SessionState>>();
check<Agree<M.SessionSummary, S.SessionSummary>>();
check<Agree<M.CreateSessionRequest, S.CreateSessionRequest>>();
check<Agree<M.CreateSessionResponse, S.CreateSessionResponse>>();
check<Agree<M.SendMessageResponse, S.MessageResponse>>();
check<Agree<M.PermissionAnswer, S.PermissionAnswer>>();
check<Agree<M.FileEntry, S.FileEntry>>();
check<Agree<M.Architecture, S.ArchitectureInfo>>();
check<Agree<M.AgentProfileSummary, S.ProfileSummary>>();
check<Agree<M.ApiErrorBody, S.Error>>();
check<Agree<M.EventsPage, S.EventPage, "events">>();
check<Agree<M.SessionFile, S.SessionFile, "contentOmitted">>();
check<Agree<M.SessionSuccess, S.SessionSuccess>>();
check<Agree<M.UpdateOptionsResponse, S.UpdateOptionsResponse>>();
check<Agree<M.SyncResponse, S.SyncResponse>>();
check<Agree<M.TerminateEnvironmentResponse, S.TerminateEnvironmentResponse>>();

check<Agree<M.AuthInfo, S.AuthInfo>>();
check<Agree<M.OIDCInfo, S.OIDCInfo>>();
check<Agree<M.User, S.User>>();
check<Agree<M.NewUser, S.NewUser>>();
check<Agree<M.UserUpdate, S.UserUpdate>>();
check<Agree<M.APIToken, S.APIToken>>();
check<Agree<M.NewToken, S.NewToken>>();
check<Agree<M.CreatedToken, S.CreatedToken>>();
check<Agree<M.Share, S.Share>>();
check<Agree<M.ProviderKey, S.ProviderKey>>();
check<Agree<M.Budget, S.Budget>>();
check<Agree<M.BudgetUsage, S.BudgetUsage>>();
check<Agree<M.BudgetReport, S.BudgetReport>>();
check<Agree<M.Me, S.Me>>();
check<Agree<M.AccessRecord, S.AccessRecord>>();
check<Agree<M.AccessPage, S.AccessPage>>();
check<Agree<M.SignIn, S.SignIn>>();
