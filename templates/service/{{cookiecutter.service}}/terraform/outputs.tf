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
