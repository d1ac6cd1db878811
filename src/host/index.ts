/**
 * Host mode: one limit for every process of a host, decided in a named shared-memory
 * region. Importing this module loads a native addon; it throws at once where there is
 * none for the platform.
 */
export { type HostMemory, type HostMemoryOptions, hostMemory, removeHostMemory } from './region.js';
