"""Sentence banks the writer composes replies from: real Spanish and English, no commas."""

from __future__ import annotations

SPANISH: tuple[str, ...] = (
    "Gracias por escribirnos sobre tu pedido.",
    "He revisado el historial de tu cuenta con calma.",
    "El paquete salió del almacén central esta mañana.",
    "La entrega suele tardar entre tres y cinco días hábiles.",
    "Puedes seguir el envío desde la página de tu perfil.",
    "El reembolso aparecerá en tu tarjeta en pocos días.",
    "Hemos actualizado la dirección de envío que nos indicaste.",
    "La factura está disponible en la sección de documentos.",
    "Tu suscripción se renovará de forma automática el próximo mes.",
    "El producto tiene una garantía de dos años completos.",
    "Te recomiendo reiniciar la aplicación antes de volver a intentarlo.",
    "La contraseña nueva debe tener al menos doce caracteres.",
    "Nuestro equipo técnico ya conoce este problema y lo está resolviendo.",
    "El cambio de plan se aplica desde el siguiente ciclo de facturación.",
    "Si lo prefieres también puedes recoger el pedido en la tienda.",
    "La devolución es gratuita durante los primeros treinta días.",
    "Todavía quedan unidades disponibles en el almacén de Madrid.",
    "El descuento se aplica solo a los artículos de temporada.",
    "Revisa la carpeta de correo no deseado por si el mensaje llegó allí.",
    "La cuenta quedó verificada y ya puedes usar todas las funciones.",
    "El pago con transferencia puede tardar un día más en confirmarse.",
    "Te enviaremos un aviso cuando el repartidor esté cerca.",
    "Esta semana el servicio de atención funciona hasta las ocho.",
    "El manual de usuario explica cada paso con imágenes claras.",
    "La actualización corrige el error que describiste en tu mensaje.",
    "Los datos de tu tarjeta están protegidos y nunca los compartimos.",
    "Puedes cancelar el pedido mientras no haya salido del almacén.",
    "El tamaño que pediste vuelve a estar disponible desde hoy.",
    "Hemos añadido una nota a tu expediente para el equipo de envíos.",
    "La tienda en línea acepta pagos con tarjeta y con transferencia.",
)

ENGLISH: tuple[str, ...] = (
    "Thanks for reaching out about your order.",
    "I have looked through the history of your account carefully.",
    "The parcel left the central warehouse this morning.",
    "Delivery usually takes between three and five working days.",
    "You can follow the shipment from the page of your profile.",
    "The refund will show up on your card within a few days.",
    "We have updated the shipping address you gave us.",
    "The invoice is available in the documents section.",
    "Your subscription will renew automatically next month.",
    "The product comes with a full two year warranty.",
    "I recommend restarting the app before you try again.",
    "The new password must have at least twelve characters.",
    "Our technical team already knows about this problem and is fixing it.",
    "The plan change applies from the next billing cycle.",
    "If you prefer you can also pick up the order in the store.",
    "Returns are free during the first thirty days.",
    "There are still units available in the Madrid warehouse.",
    "The discount only applies to seasonal items.",
    "Please check the spam folder in case the message landed there.",
    "The account is verified and you can now use every feature.",
    "A bank transfer payment can take one more day to clear.",
    "We will send you a notice when the courier is close.",
    "This week the help desk is open until eight in the evening.",
    "The user manual explains every step with clear pictures.",
    "The update fixes the error you described in your message.",
    "Your card details are protected and we never share them.",
    "You can cancel the order as long as it has not left the warehouse.",
    "The size you asked for is back in stock from today.",
    "We have added a note to your file for the shipping team.",
    "The online store accepts card payments and bank transfers.",
)

CONNECTORS: dict[str, tuple[str, ...]] = {
    "es": ("Además, ", "Por cierto, ", "Sin embargo, ", "En resumen, ", "Por otro lado, "),
    "en": ("Also, ", "By the way, ", "However, ", "In short, ", "On the other hand, "),
}
"""Openers that put a comma into a sentence (used to fail ``no_commas``)."""

KEYWORD_SENTENCES: dict[str, tuple[str, ...]] = {
    "es": ("Tu {kw} queda registrado con prioridad alta.", "He abierto un {kw} nuevo para seguir el caso."),
    "en": ("Your {kw} is now logged with high priority.", "I opened a new {kw} to follow the case."),
}

ANSWER_SENTENCES: dict[str, tuple[str, ...]] = {
    "es": ("El número de seguimiento es {answer}.", "La respuesta corta es {answer}."),
    "en": ("The tracking number is {answer}.", "The short answer is {answer}."),
}
