output "namespace" {
  description = "Namespace the service runs in."
  value       = local.namespace
}

output "service_name" {
  description = "Name of the Kubernetes Service."
  value       = kubernetes_service_v1.app.metadata[0].name
}

output "service_url" {
  description = "URL of the service inside the cluster."
  value       = "http://${kubernetes_service_v1.app.metadata[0].name}.${local.namespace}.svc.cluster.local"
}

output "infer_urls" {
  description = "Open Inference Protocol v2 endpoint of each model, inside the cluster."
  value = {
    for model in var.models :
    model => "http://${kubernetes_service_v1.app.metadata[0].name}.${local.namespace}.svc.cluster.local/v2/models/${model}/infer"
  }
}

output "grpc_target" {
  description = "host:port of Open Inference over gRPC inside the cluster (tritonclient.grpc.InferenceServerClient(url=...))."
  value       = "${kubernetes_service_v1.app.metadata[0].name}.${local.namespace}.svc.cluster.local:${var.grpc_port}"
}
